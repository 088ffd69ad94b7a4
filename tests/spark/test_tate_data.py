"""The Tate table (data/tate/) is what conf/tate.toml says it is: every feature's column of the type
its kind takes, every label one of its classes, the split column's three splits, and no column
that gives the period away among the features."""
from __future__ import annotations

import hashlib

import pytest

from tfos_jobs import config
from tfos_jobs.data import sources

from tests.conftest import ROOT

CONFIG = ROOT / "conf" / "tate.toml"


@pytest.fixture(scope="module")
def tate():
    return config.load(CONFIG)


def test_the_file_matches_the_spec(spark, tate):
    src = tate.sources[tate.prepare.main]
    df = sources.read(spark, tate.prepare.main, src)
    assert tate.features.input_type_errors(sources.column_types(df)) == []
    kinds = {f.name: f.kind for f in tate.features.features}
    assert kinds["title"] == "text" and kinds["subjects"] == "list" and kinds["period"] == "label"
    assert tate.features.label.task == "multiclass"
    label = tate.features.label.name
    counts = {(r[0], r[1]): r[2] for r in df.groupBy(label, tate.prepare.split.column).count().collect()}
    assert {c for c, _ in counts} == set(tate.features.label.classes)
    assert {s for _, s in counts} == {"train", "eval", "test"}
    assert sum(counts.values()) == df.count() == df.select("acno").distinct().count() == 26_276
    for period in tate.features.label.classes:  # no class is rare in any split
        assert all(counts[(period, s)] >= 400 for s in ("train", "eval", "test")), period


def test_the_features_leave_out_what_gives_the_period_away(tate):
    assert tate.prepare.split.mode == "column" and tate.prepare.split.column == "subset"
    names = {f.name for f in tate.features.features}
    assert not names & {"year", "artist_birth_year", "artist", "subset"}


def test_the_split_is_the_accession_number_s_hash(spark):
    """Rows keep their split whatever else changes: the MD5 of `acno` in 20 buckets, 14 train, 3 eval, 3 test."""
    rows = spark.read.parquet(str(ROOT / "data" / "tate" / "tate.parquet")).select("acno", "subset").collect()
    bucket = {r.acno: int(hashlib.md5(r.acno.encode()).hexdigest(), 16) % 20 for r in rows}
    expected = {a: "train" if b < 14 else "eval" if b < 17 else "test" for a, b in bucket.items()}
    assert {r.acno: r.subset for r in rows} == expected
