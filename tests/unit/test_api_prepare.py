"""api.prepare from a DataFrame the caller holds, on a real session: the dataset, and nothing left behind."""
from __future__ import annotations

import pytest

from tfos_jobs import api
from tfos_jobs.data import dataset, synthetic
from tfos_jobs.errors import ConfigError

SPEC = {
    "person_id": {"kind": "key"},
    "age": {"kind": "numeric"},
    "education": {"kind": "categorical"},
    "income": {"kind": "label", "task": "binary", "positive": [">50K"], "negative": ["<=50K"]},
}


def test_prepare_from_a_dataframe_writes_a_dataset_and_drops_its_view(spark, tmp_path):
    people = spark.createDataFrame(synthetic.people_chunk(0, 600, seed=3), synthetic.PEOPLE_SCHEMA)
    before = {t.name for t in spark.catalog.listTables()}
    lines: list[str] = []
    manifest = api.prepare(spark, spec=SPEC, tables={"people": people}, output=str(tmp_path / "ds"),
                           split={"mode": "hash", "eval_fraction": 0.25}, log=lines.append)
    assert sum(s.records for s in manifest.splits.values()) == 600
    assert 0.15 < manifest.splits["eval"].records / 600 < 0.35
    assert dataset.read(str(tmp_path / "ds")).spec.model_inputs == ("age", "education")
    assert {t.name for t in spark.catalog.listTables()} == before
    with pytest.raises(ConfigError, match="give tables= .* or a config="):
        api.prepare(spark, spec=SPEC, output=str(tmp_path / "other"))


def test_a_table_that_misses_a_spec_column_is_named(spark, tmp_path):
    people = spark.createDataFrame(synthetic.people_chunk(0, 50, seed=3), synthetic.PEOPLE_SCHEMA).drop("education")
    with pytest.raises(Exception, match="education"):
        api.prepare(spark, spec=SPEC, tables={"people": people}, output=str(tmp_path / "ds"))
    assert not (tmp_path / "ds").exists()
