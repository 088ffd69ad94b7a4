"""What `tfos predict` writes: the key, the input columns asked for, the predictions; nothing
else of the input and none of the package's own columns."""
from __future__ import annotations

import dataclasses

import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import config
from tfos_jobs.data import columns
from tfos_jobs.errors import ConfigError
from tfos_jobs.jobs.serve import predict as predict_job

from tests.conftest import CENSUS, census_overrides
from tests.serving.conftest import PEOPLE

PREDICTIONS = [("predicted_probability", "double"), ("predicted_label", "string")]


def run(spark, cfg, tmp_path, **predict):
    cfg = dataclasses.replace(cfg, predict=dataclasses.replace(cfg.predict, output=str(tmp_path / "pred"), **predict))
    summary = predict_job.run(spark, cfg, log=lambda _: None)
    return spark.read.parquet(summary.output)


def test_predictions_hold_the_key_and_the_predictions_only(spark, setup, tmp_path):
    cfg, _, _ = setup
    out = run(spark, cfg, tmp_path)
    assert out.dtypes == [("person_id", "bigint"), *PREDICTIONS]
    assert out.count() == PEOPLE


def test_a_text_sources_own_columns_are_not_written(spark, setup, tmp_path):
    """JSON and CSV readers add the unparsed text and its file to every row they read."""
    cfg, _, features = setup
    features.limit(200).write.json(str(tmp_path / "scoring"))
    cfg = config.load(CENSUS, census_overrides(tmp_path, tmp_path / "o") + [
        "sources.scoring.format=json", f"sources.scoring.path={tmp_path / 'scoring'}", "predict.input=scoring",
        f"predict.model={cfg.predict.model}"])
    out = run(spark, cfg, tmp_path, keep=("income",))
    assert out.dtypes == [("person_id", "bigint"), ("income", "string"), *PREDICTIONS]
    assert out.count() == 200


def test_kept_and_partition_columns_come_after_the_key(spark, setup, tmp_path):
    cfg, _, features = setup
    out = run(spark, cfg, tmp_path, keep=("income", "age"), partition_by=("sex",))
    assert sorted(out.dtypes) == sorted([("person_id", "bigint"), ("income", "string"), ("age", "int"),
                                         ("sex", "string"), *PREDICTIONS])
    assertDataFrameEqual(out.select("person_id", "income", "age", "sex"),
                         features.select("person_id", "income", "age", "sex"))
    assert not set(columns.INTERNAL) & set(out.columns)


def test_a_kept_column_the_input_lacks_is_named(spark, setup, tmp_path):
    cfg, _, _ = setup
    with pytest.raises(ConfigError, match=r"predict.keep: 'salary' not among the input's columns \(person_id, "):
        run(spark, cfg, tmp_path, keep=("salary",))
