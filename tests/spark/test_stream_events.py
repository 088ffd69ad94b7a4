"""Kafka records parsed as `tfos stream` parses them (`jobs.stream.driver.events.parsed`), on a
static frame of the Kafka source's shape: typed columns, the Kafka time, and for each event that
cannot be scored its reason, the first that applies."""
from __future__ import annotations

import datetime as dt

from pyspark.sql import functions as F

from tfos_jobs import config
from tfos_jobs.contracts import stream as contract
from tfos_jobs.jobs.stream.driver import events

from tests.conftest import ROOT

FLEET = ROOT / "conf" / "fleet.toml"
SENT = dt.datetime(2026, 3, 1, 12, 0, 0)


def test_each_event_is_typed_or_set_aside_with_the_first_reason_that_applies(spark):
    cfg = config.load(FLEET)
    spec = cfg.features
    values = {
        "good": '{"asset_id": "a1", "ts": "2026-01-01T00:01:00", "temperature": 20.5, "rpm": null}',
        "not_json": "{oops",
        "wrong_type": '{"asset_id": "a1", "ts": "2026-01-01T00:01:00", "temperature": "hot"}',
        "no_key": '{"ts": "2026-01-01T00:01:00", "temperature": 1.0}',
        "no_time": '{"asset_id": "a2", "temperature": 1.0}',
        "empty": None,
    }
    records = spark.createDataFrame([(name, value, SENT) for name, value in values.items()],
                                    "key STRING, value STRING, timestamp TIMESTAMP") \
        .withColumn("value", F.col("value").cast("binary"))
    parsed = events.parsed(records, events.schema(spark, cfg, spec), spec)
    rows = {r[contract.RAW]: r.asDict() for r in parsed.collect()}
    good = rows[values["good"]]
    assert good[contract.REASON] is None and good["asset_id"] == "a1" and good["temperature"] == 20.5
    assert good["ts"] == dt.datetime(2026, 1, 1, 0, 1) and good["rpm"] is None
    assert good[contract.EVENT_TIMESTAMP] == int(SENT.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
    reasons = {name: rows[value][contract.REASON] for name, value in values.items() if value is not None}
    assert reasons == {"good": None, "not_json": "malformed", "wrong_type": "malformed", "no_key": "missing_key",
                       "no_time": "missing_time"}
    empty = rows[None]
    assert empty[contract.REASON] == "malformed" and "no value" in empty[contract.DETAIL]
    assert "asset_id" in rows[values["no_key"]][contract.DETAIL]
    assert "ts is missing" in rows[values["no_time"]][contract.DETAIL]
    assert "temperature" in rows[values["wrong_type"]][contract.DETAIL]  # the columns are listed
