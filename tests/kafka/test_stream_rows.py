"""`tfos stream` on rows: people's rows as JSON events, joined on the stream with the static
tables (regions, the events log's activity) exactly as `tfos predict` joins them, and scored as
`tfos predict` scores them; malformed events quarantined with their raw value, and the scored
rows sent to an output topic, keyed by person."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CENSUS, census_overrides
from tests.kafka.test_stream import BIN, WAIT, finished, started
from tfos_jobs import config
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.data import synthetic
from tfos_jobs.jobs import prepare
from tfos_jobs.serving.scoring import input_table, with_predictions
from tfos_jobs.jobs.stream.driver import replay
from tfos_jobs.jobs.train.driver import tracked as train

pytestmark = pytest.mark.slow

PEOPLE = 800
KEY = "person_id"


@pytest.fixture(scope="module")
def census_model(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("stream-census")
    synthetic.generate(spark, str(root / "raw"), PEOPLE, 3.0, 11, "2026-01-01")
    overrides = [*census_overrides(root / "raw", root / "dataset", PEOPLE), f"train.dataset={root / 'dataset'}",
                 f"train.model_dir={root / 'model'}", f"predict.model={root / 'model'}", "train.strategy=local",
                 "train.epochs=1", "train.batch_size=128", "train.tensorboard=false"]
    cfg = config.load(CENSUS, overrides)
    prepare.run(spark, cfg)
    train.run(spark, cfg, overwrite=True)
    return cfg, root, overrides


def test_rows_are_joined_with_the_static_tables_and_scored_as_predict_scores_them(spark, kafka, census_model):
    from udfs import register

    cfg, root, overrides = census_model
    topic, out_topic = "people", "people-scored"
    kafka.create_topic(topic, partitions=2)
    people = spark.read.parquet(str(root / "raw" / "people"))
    sent = replay.send(replay.as_events(people, KEY, None), bootstrap_servers=kafka.bootstrap, topic=topic, rate=0,
                       log=lambda _: None)
    bad = ['{"person_id": 1, "age": "old"}', "]["]
    kafka.produce(topic, [(None, value, None) for value in bad])

    sets = [*overrides, f"stream.bootstrap_servers=\"{kafka.bootstrap}\"", f"stream.topic={topic}",
            f"stream.output_topic={out_topic}", f"stream.output={root / 'scores'}",
            f"stream.quarantine={root / 'quarantine'}", f"stream.checkpoint={root / 'checkpoint'}",
            f"stream.progress_log={root / 'micro_batches.jsonl'}", "stream.trigger_seconds=1",
            "stream.max_offsets_per_trigger=300", "stream.stop_when_idle_seconds=10", "spark.master=local[2]"]
    log = root / "stream.log"
    out = finished(started([str(BIN / "tfos"), "stream", "--config", str(CENSUS),
                            *[a for s in sets for a in ("--set", s)]], log), log)
    assert "stream stopped (no event for 10 s)" in out

    got = spark.read.parquet(str(root / "scores")).toPandas()
    assert len(got) == sent == PEOPLE and got[KEY].is_unique
    assert got[contract.MICRO_BATCH].nunique() >= 2  # 300 events per micro-batch at most
    files = {d.name: len(list(d.glob("part-*.parquet"))) for d in (root / "scores").glob(f"{contract.MICRO_BATCH}=*")}
    assert files and max(files.values()) <= 2, files  # one per core of local[2], not one per shuffle partition (8)
    udf = register(spark, "batch_income", str(root / "model"))
    want = with_predictions(input_table(spark, cfg, udf.spec), udf).select(
        KEY, serving.predicted(serving.PROBABILITY), serving.predicted(serving.LABEL)).toPandas()
    both = got.merge(want, on=KEY, suffixes=("", "_batch"))
    assert len(both) == PEOPLE
    probability = serving.predicted(serving.PROBABILITY)
    np.testing.assert_allclose(both[probability], both[f"{probability}_batch"], rtol=1e-6, atol=1e-7)
    assert (both[serving.predicted(serving.LABEL)] == both[f"{serving.predicted(serving.LABEL)}_batch"]).all()

    quarantined = spark.read.parquet(str(root / "quarantine")).toPandas()
    assert sorted(quarantined[contract.RAW]) == sorted(bad)
    assert set(quarantined[contract.REASON]) == {contract.Reason.MALFORMED.value}

    sent_on = kafka.consume(out_topic, expected=PEOPLE, timeout=WAIT)
    scored = pd.DataFrame([json.loads(r.value) for r in sent_on])
    assert set(scored[KEY]) == set(got[KEY]) and {r.key for r in sent_on} == {str(k) for k in got[KEY]}
    assert contract.MODEL_VERSION in scored
