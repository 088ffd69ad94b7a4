"""The MSL fleet (data/msl/) is what its README and conf/msl.toml say it is: 27 channels, each with a train
period on 1-second steps and a test period right after it, 55 metrics as doubles, and every labelled
anomaly inside its channel's test period. Plain pandas, no Spark."""
from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from tfos_jobs import config

from tests.conftest import ROOT

DATA = ROOT / "data" / "msl"
CHANNELS = 27
TRAIN_ROWS, TEST_ROWS, ANOMALIES = 58_317, 73_729, 36
METRICS = [f"s{i:02d}" for i in range(55)]
ONE_SECOND = pd.Timedelta(seconds=1)


@pytest.fixture(scope="module")
def train() -> pd.DataFrame:
    return pd.read_parquet(DATA / "msl_train.parquet")


@pytest.fixture(scope="module")
def test() -> pd.DataFrame:
    return pd.read_parquet(DATA / "msl_test.parquet")


@pytest.fixture(scope="module")
def truth() -> pd.DataFrame:
    return pd.read_parquet(DATA / "msl_truth.parquet")


def test_the_counts_are_the_readme_s(train, test, truth):
    readme = (DATA / "README.md").read_text()
    assert (len(train), len(test), len(truth)) == (TRAIN_ROWS, TEST_ROWS, ANOMALIES)
    assert train.asset_id.nunique() == test.asset_id.nunique() == CHANNELS
    for number in (f"{TRAIN_ROWS:,}", f"{TEST_ROWS:,}", f"{ANOMALIES} labelled anomal", f"{CHANNELS} telemetry channels"):
        assert number in readme, number
    assert set(truth.asset_id) <= set(test.asset_id)
    assert sorted(truth.kind.unique()) == ["contextual", "point"]


def test_the_columns_and_their_types(train, test, truth):
    for df in (train, test):
        assert list(df.columns) == ["asset_id", "ts", *METRICS]
        assert df.asset_id.dtype == object and df.ts.dtype == "datetime64[us]"
        assert (df[METRICS].dtypes == "float64").all() and df[METRICS].notna().all().all()
    assert list(truth.columns) == ["asset_id", "start", "end", "kind"]
    assert truth.start.dtype == truth.end.dtype == "datetime64[us]"


def test_each_channel_s_test_period_continues_its_train_period_second_by_second(train, test):
    for channel, rows in train.groupby("asset_id"):
        later = test[test.asset_id == channel]
        ts = pd.concat([rows.ts, later.ts]).reset_index(drop=True)
        assert (ts.diff().dropna() == ONE_SECOND).all(), channel
        assert later.ts.min() == rows.ts.max() + ONE_SECOND, channel


def test_every_anomaly_lies_inside_its_channel_s_test_period(test, truth):
    period = test.groupby("asset_id").ts.agg(["min", "max"])
    for row in truth.itertuples():
        first, last = period.loc[row.asset_id]
        assert first <= row.start <= row.end <= last, row
    inside = sum(((test.asset_id == r.asset_id) & test.ts.between(r.start, r.end)).sum() for r in truth.itertuples())
    assert round(inside / len(test), 3) == 0.105  # the README's 10.5 %


def test_the_config_reads_these_columns_as_a_fleet(train):
    cfg = config.load(ROOT / "conf" / "msl.toml")
    kinds = {f.name: f.kind for f in cfg.features.features}
    assert kinds == {"asset_id": "key", "ts": "time", **{m: "sequence" for m in METRICS}}
    assert cfg.sources["train_period"].path == "data/msl/msl_train.parquet"
    assert cfg.sources["test_period"].path == "data/msl/msl_test.parquet"


def test_the_config_is_asd_s_with_only_the_data_swapped():
    """The same model, windows, split and training as conf/asd.toml: only paths, names and columns differ."""
    asd, msl = config.load(ROOT / "conf" / "asd.toml"), config.load(ROOT / "conf" / "msl.toml")
    paths = {"dataset": "demo-output/asd/dataset", "model_dir": "demo-output/asd/model"}
    assert dataclasses.replace(msl.train, **paths) == asd.train
    assert dataclasses.replace(msl.prepare, output="demo-output/asd/dataset") == asd.prepare
    assert msl.spark.master == asd.spark.master and msl.spark.conf == asd.spark.conf
    assert msl.predict.input == asd.predict.input == "test_period"
    time = [f for f in msl.features.features if f.kind == "time"]
    assert time == [f for f in asd.features.features if f.kind == "time"]
