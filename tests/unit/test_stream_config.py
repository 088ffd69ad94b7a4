"""[stream]: what `tfos stream` refuses before Spark starts, each error naming its key."""
from __future__ import annotations

import pytest

from tfos_jobs import config
from tfos_jobs.errors import ConfigError

from tests.conftest import ROOT

FLEET = ROOT / "conf" / "fleet.toml"


def test_the_fleet_config_streams_its_readings_into_its_own_places():
    st = config.load(FLEET).stream
    assert st.topic == "fleet-readings" and st.watermark_seconds == 600
    assert len({st.output, st.quarantine, st.checkpoint}) == 3


@pytest.mark.parametrize("override, message", [
    ("stream.topic=''", "stream.topic: must not be empty"),
    ("stream.checkpoint=demo-output/fleet/stream/scores", "must be three different places"),
    ("stream.watermark_seconds=-1", "stream.watermark_seconds: must be >= 0, got -1"),
    ("stream.trigger_seconds=0", "stream.trigger_seconds: must be > 0, got 0"),
    ("stream.max_offsets_per_trigger=-5", "stream.max_offsets_per_trigger: must be >= 0"),
    ("stream.output_topic=fleet-readings", "stream.output_topic: 'fleet-readings' is the input topic"),
    ("stream.kafka={'group.id' = 'mine'}", "stream.kafka: group.id set by the job itself"),
    ("stream.starting_offsets=newest", "stream.starting_offsets"),
])
def test_a_bad_stream_setting_is_refused_naming_its_key(override, message):
    with pytest.raises(ConfigError) as err:
        config.load(FLEET, [override])
    assert message in str(err.value)


def test_events_hold_a_text_as_a_string_a_list_and_a_vector_as_arrays_whatever_the_table_stores():
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import ArrayType, DoubleType, LongType, StringType

    from tfos_jobs.features.spec import (FeatureSpec, KeyFeature, Label, ListFeature, NumericFeature, TextFeature,
                                         VectorFeature)
    from tfos_jobs.jobs.stream.driver.events import json_type

    spec = FeatureSpec((KeyFeature("id"), TextFeature("review"), ListFeature("tags"), ListFeature("clicked"),
                        VectorFeature("emb", dim=2), NumericFeature("price"), Label("y")))
    assert json_type(spec, "review", StringType()) == StringType()
    assert json_type(spec, "tags", StringType()) == ArrayType(StringType())  # a CSV's column, say
    assert json_type(spec, "clicked", ArrayType(LongType())) == ArrayType(LongType())
    assert json_type(spec, "emb", VectorUDT()) == ArrayType(DoubleType())
    assert json_type(spec, "price", DoubleType()) == DoubleType() and json_type(spec, "other", LongType()) == LongType()
