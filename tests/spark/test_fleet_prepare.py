"""Preparing sensor windows from per-asset files: records plain TensorFlow can read, splits by
asset, dropped windows counted, statistics; and bad input files named or quarantined."""
from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfos_jobs import config
from tfos_jobs.features.standardisation import STATS_PER_ASSET
from tfos_jobs.data import fleet
from tfos_jobs.jobs import prepare
from tfos_jobs.errors import InputError

from tests.conftest import ROOT

FLEET = ROOT / "conf" / "fleet.toml"
ASSETS, STEPS = 6, 1500


def fleet_config(raw: Path, out: Path, *extra: str):
    sensors = raw / fleet.SENSORS_DIR
    return config.load(FLEET, [f"sources.sensors.path={sensors}", f"sources.sensors_csv.path={sensors}",
                               f"prepare.output={out}", "prepare.files_per_split=2", "prepare.split.eval_fraction=0.45",
                               *extra])


@pytest.fixture(scope="module")
def utc(spark):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return spark


@pytest.fixture(scope="module")
def prepared(utc, tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    fleet.generate(str(root / "raw"), ASSETS, STEPS, seed=3, csv_every=3)
    # a gap of 21 steps (> max_gap 5) and a dropout of 21 values (> fill_limit 5) in one asset
    rewrite(root / "raw" / fleet.SENSORS_DIR / "asset-0000.parquet",
            lambda f: f.drop(index=range(200, 221)).assign(vibration=f["vibration"].mask(f.index.isin(range(600, 621)))))
    manifest = prepare.run(utc, fleet_config(root / "raw", root / "dataset"), log=lambda _: None).to_dict()
    return root, manifest


def read_with_plain_tensorflow(dataset: Path, split: str) -> tuple[dict, dict]:
    """Every record of a split, parsed with nothing but `_meta/feature_spec.json`."""
    import tensorflow as tf

    records = json.loads((dataset / "_meta" / "feature_spec.json").read_text())["records"]
    context = {n: tf.io.FixedLenFeature([], c["dtype"]) for n, c in records.items() if c["part"] == "context"}
    lists = {n: tf.io.FixedLenSequenceFeature([], c["dtype"]) for n, c in records.items() if c["part"] == "feature_list"}
    serialized = list(tf.data.TFRecordDataset(sorted(glob.glob(str(dataset / split / "*.tfrecord")))).as_numpy_iterator())
    ctx, seq, _ = tf.io.parse_sequence_example(serialized, context_features=context, sequence_features=lists)
    return {k: v.numpy() for k, v in ctx.items()}, {k: v.numpy() for k, v in seq.items()}


def test_records_read_by_plain_tensorflow_split_by_asset(prepared):
    root, manifest = prepared
    seen = {}
    for split in ("train", "eval"):
        ctx, seq = read_with_plain_tensorflow(root / "dataset", split)
        assert len(ctx["asset_id"]) == manifest["splits"][split]["records"] > 0
        assert all(v.shape == (len(ctx["asset_id"]), 64) for v in seq.values()) and len(seq) == len(fleet.SENSORS)
        assert set(np.unique(ctx["window_end"] - ctx["window_start"])) == {63 * 60}
        assert not any(np.isnan(v).any() for v in seq.values())
        seen[split] = set(ctx["asset_id"])
    assert seen["train"] and seen["eval"] and not seen["train"] & seen["eval"]
    assert len(seen["train"] | seen["eval"]) == ASSETS


def test_every_window_is_kept_or_counted_and_stats_are_the_train_windows(prepared):
    root, manifest = prepared
    expected = 0
    for path in sorted((root / "raw" / fleet.SENSORS_DIR).iterdir()):
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, parse_dates=["ts"])
        steps = int((frame["ts"].max() - frame["ts"].min()).total_seconds() // 60) + 1
        expected += (steps - 64) // 64 + 1
    w = manifest["windows"]
    assert w["kept"] + w["dropped"] == expected
    assert w["dropped"] == sum(w["dropped_by_reason"].values())
    assert w["dropped_by_reason"]["gap"] >= 1 and w["dropped_by_reason"]["missing_values"] >= 1
    assert manifest["sources"]["sensors_csv"]["files"] == 2 and manifest["rows"]["rejected"] == 0
    ctx, seq = read_with_plain_tensorflow(root / "dataset", "train")
    stats = json.loads((root / "dataset" / "_meta" / "stats.json").read_text())
    sensors = [f.name for f in fleet_config(root / "raw", root / "dataset").features.sequences]
    for sensor in ("temperature", "rpm"):
        values = seq[sensor].astype(np.float64)
        assert stats[sensor]["count"] == values.size
        assert stats[sensor]["mean"] == pytest.approx(values.mean(), rel=1e-6)
        assert stats[sensor]["std"] == pytest.approx(values.std(), rel=1e-5)
    # and each asset's own, under the key: the train split's assets, in sensor order
    per_asset = stats["asset_id"][STATS_PER_ASSET]
    assets = sorted({a.decode() for a in ctx["asset_id"]})
    assert sorted(per_asset) == assets and stats["asset_id"]["count"] == len(assets) >= 2
    for asset in assets:
        mine = ctx["asset_id"] == asset.encode()
        for j, sensor in enumerate(sensors):
            values = seq[sensor][mine].astype(np.float64)
            assert per_asset[asset]["count"][j] == values.size
            assert per_asset[asset]["mean"][j] == pytest.approx(values.mean(), rel=1e-6)
            assert per_asset[asset]["std"][j] == pytest.approx(values.std(), rel=1e-5)


ONLY_PARQUET = "prepare.union=[]"


def small_fleet(root: Path, assets: int = 2, steps: int = 300) -> Path:
    """A fleet of Parquet files only, to be damaged by a test."""
    fleet.generate(str(root / "raw"), assets, steps, seed=5, csv_every=0)
    return root / "raw" / fleet.SENSORS_DIR


def rewrite(path: Path, change) -> None:
    frame = pq.read_table(path).to_pandas()
    frame = change(frame)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)


def test_a_file_without_a_sensor_column_is_named(utc, tmp_path):
    sensors = small_fleet(tmp_path)
    rewrite(sensors / "asset-0001.parquet", lambda f: f.drop(columns=["vibration"]))
    with pytest.raises(InputError, match=r"file \S*asset-0001.parquet: column 'vibration' \(sequence feature\) is missing"):
        prepare.run(utc, fleet_config(tmp_path / "raw", tmp_path / "out", ONLY_PARQUET), log=lambda _: None)


def test_a_time_column_of_the_wrong_type_is_named(utc, tmp_path):
    sensors = small_fleet(tmp_path)
    rewrite(sensors / "asset-0000.parquet", lambda f: f.assign(ts=f["ts"].astype(str)))
    with pytest.raises(InputError, match=r"asset-0000.parquet: column 'ts' \(time feature\) has type string"):
        prepare.run(utc, fleet_config(tmp_path / "raw", tmp_path / "out", ONLY_PARQUET), log=lambda _: None)


def test_duplicate_timestamps_fail_naming_the_file_and_column(utc, tmp_path):
    sensors = small_fleet(tmp_path)
    rewrite(sensors / "asset-0001.parquet", lambda f: pd.concat([f, f.iloc[[10]]]))
    with pytest.raises(InputError, match=r"asset-0001.parquet: column 'ts' has 1 duplicate timestamp"):
        prepare.run(utc, fleet_config(tmp_path / "raw", tmp_path / "out", ONLY_PARQUET), log=lambda _: None)


def test_non_numeric_csv_values_are_quarantined_and_counted(utc, tmp_path):
    sensors = small_fleet(tmp_path)
    frame = pq.read_table(sensors / "asset-0001.parquet").to_pandas()
    (sensors / "asset-0001.parquet").unlink()
    frame["rpm"] = frame["rpm"].map(lambda v: f"{v:.3f}").astype(object)
    frame["ts"] = frame["ts"].dt.strftime("%Y-%m-%d %H:%M:%S").astype(object)
    frame.loc[20, "rpm"] = "n/a"
    frame.loc[40, "ts"] = "yesterday"
    frame.to_csv(sensors / "asset-0001.csv", index=False)
    lines = (sensors / "asset-0001.csv").read_text().splitlines()
    out = tmp_path / "out"
    manifest = prepare.run(utc, fleet_config(tmp_path / "raw", out), log=lambda _: None).to_dict()
    assert manifest["rows"] == {"read": 600, "rejected": 2}
    rejects = [json.loads(line) for p in sorted((out / "_rejects").glob("*.json")) for line in p.read_text().splitlines()]
    assert sorted(r["_raw_record"] for r in rejects) == sorted([lines[21], lines[41]])
    assert all(r["_source_file"].endswith("asset-0001.csv") for r in rejects)
    # two single missing steps (<= max_gap): filled, no window lost
    assert manifest["windows"]["dropped"] == 0 and manifest["windows"]["kept"] == 2 * (300 // 64)


def test_a_csv_file_without_a_sensor_column_is_named(utc, tmp_path):
    sensors = small_fleet(tmp_path)
    frame = pq.read_table(sensors / "asset-0000.parquet").to_pandas().drop(columns=["humidity"])
    (sensors / "asset-0000.parquet").unlink()
    frame.to_csv(sensors / "asset-0000.csv", index=False)
    with pytest.raises(InputError, match=r"asset-0000.csv: column 'humidity' \(sequence feature\) is missing"):
        prepare.run(utc, fleet_config(tmp_path / "raw", tmp_path / "out"), log=lambda _: None)
    shutil.rmtree(tmp_path / "raw")
