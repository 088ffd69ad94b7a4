"""How warehouse sources are read: JDBC in parallel ranges with filters pushed to the database,
Hive tables with partitions pruned by the source's filter."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from tests.warehouse.conftest import DAY, PASSWORD_ENV, PEOPLE, WAREHOUSE, pg_sets, tfos


def test_sources_report(bad, warehouse, spark):
    _, got, _ = bad  # the good sources of the run in test_bad_sources
    raw_people = spark.read.parquet(str(warehouse["raw"] / "people"))
    raw_events = spark.read.parquet(str(warehouse["raw"] / "events"))

    # numPartitions = 4 on person_id: four range queries, four tasks, every row
    assert got["people"]["read_tasks"] == 4 and got["people"]["rows"] == PEOPLE
    # the filter runs in PostgreSQL
    assert "*GreaterThan(age,60)" in got["older"]["pushed_filters"]
    assert got["older"]["rows"] == raw_people.where("age > 60").count() > 0
    # one day's partition of the events table, and only its files
    assert any("dt" in f and DAY in f for f in got["events"]["partition_filters"])
    day_files = [p for p in (warehouse["hive"] / "census.db" / "events" / f"dt={DAY}").iterdir()
                 if p.name.endswith(".parquet")]
    assert got["events"]["files"] == len(day_files) >= 1
    assert got["events"]["rows"] == raw_events.where(F.to_date("ts") == dt.date.fromisoformat(DAY)).count() > 0


@pytest.mark.slow  # make test shows it through the byte-identical records prepared from the same 4-range read
def test_a_partitioned_jdbc_read_returns_every_row_once(pg, warehouse, spark, tmp_path):
    out = tmp_path / "people"
    tfos("sql", "--config", str(WAREHOUSE), "-e", "SELECT * FROM people", "--output", str(out),
         sets=pg_sets(pg, warehouse), env={PASSWORD_ENV: pg.password})
    assertDataFrameEqual(spark.read.parquet(str(out)), spark.read.parquet(str(warehouse["raw"] / "people")))
