"""`tfos demo-warehouse`: people from PostgreSQL, events and regions from Hive tables, prepared
into the same bytes as the Parquet files of the same tables."""
from __future__ import annotations

import json
import socket

import psutil

from tfos_jobs.api.demos.warehouse import compare, digests

from tests.warehouse.conftest import PEOPLE


def test_records_from_postgres_and_hive_equal_those_from_parquet(warehouse):
    out = warehouse["proc"].stdout
    dataset, twin = warehouse["dataset"], f"{warehouse['dataset']}-from-files"
    ours, theirs = digests(str(dataset)), digests(twin)
    assert ours == theirs  # byte for byte
    assert len([k for k in ours if k.startswith(("train/", "eval/"))]) == 8  # 4 files per split
    assert "_meta/stats.json" in ours and "_meta/vocab/occupation.txt" in ours
    assert compare(str(dataset), twin)[0]
    assert "== records identical: 8 record files" in out
    manifest = json.loads((dataset / "_meta" / "manifest.json").read_text())
    assert manifest["sources"]["people"]["location"].startswith(f"people at jdbc:postgresql://127.0.0.1:{warehouse['port']}/")
    assert manifest["sources"]["events"]["location"] == "census.events"
    assert manifest["splits"]["train"]["records"] + manifest["splits"]["eval"]["records"] + manifest["rejected"]["rows"] == PEOPLE


def test_the_hive_tables_stay_and_the_events_are_partitioned_by_date(warehouse):
    events = warehouse["hive"] / "census.db" / "events"
    assert len(list(events.glob("dt=*"))) >= 85  # the 90 days of activity before as_of
    assert (warehouse["hive"] / "census.db" / "regions").is_dir()
    assert (warehouse["hive"] / "metastore_db").is_dir()
    assert "loaded events into Hive table census.events" in warehouse["proc"].stdout


def test_the_demo_leaves_no_database_server_running_and_prints_no_password(warehouse):
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", warehouse["port"])) != 0
    port = str(warehouse["port"])
    leftovers = [p for p in psutil.process_iter(["name", "cmdline"])
                 if p.info["name"] == "postgres" and port in " ".join(p.info["cmdline"] or []).split()]
    assert not leftovers
    proc = warehouse["proc"]
    assert warehouse["password"] not in proc.stdout + proc.stderr
