"""Sensor windows split by time, as a plant or a published fleet benchmark splits them: train on
a period, choose on the next, test on the last. Each asset's series is cut at instants of its
own (fractions of its span) or at the same instants for all; no window spans two splits (those
that would are dropped and counted), and an instant outside the data is an error naming it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tfos_jobs import config
from tfos_jobs.errors import ConfigError, InputError
from tfos_jobs.jobs import prepare

from tests.conftest import ROOT

SENSORS = ROOT / "conf" / "sensors.toml"
MACHINES, STEPS = 3, 600  # 23 windows of 50 steps, one every 25, per machine
START = pd.Timestamp("2026-03-01 00:00:00")


@pytest.fixture(scope="module")
def readings(tmp_path_factory) -> Path:
    rng = np.random.default_rng(3)
    frames = [pd.DataFrame({"machine": f"m{i}", "recorded_at": pd.date_range(START, periods=STEPS, freq="s"),
                            "signal": np.sin(np.arange(STEPS) / 5) + rng.normal(0, 0.1, STEPS)})
              for i in range(MACHINES)]
    path = tmp_path_factory.mktemp("time-split") / "readings.parquet"
    pd.concat(frames).to_parquet(path, coerce_timestamps="us")
    return path


def prepared(spark, readings: Path, root: Path, *split: str) -> tuple[dict, dict[str, list[tuple[str, int, int]]]]:
    """The manifest, and each split's windows (machine, start, end in seconds from START)."""
    import tensorflow as tf

    cfg = config.load(SENSORS, [f"sources.readings.path={readings}", f"prepare.output={root}",
                                "prepare.split.mode=time", *split])
    prepare.run(spark, cfg, log=lambda _: None)
    context = {"machine": tf.io.FixedLenFeature([], tf.string), "window_start": tf.io.FixedLenFeature([], tf.int64),
               "window_end": tf.io.FixedLenFeature([], tf.int64)}
    origin = int(START.timestamp())
    windows = {}
    for part in ("train", "eval", "test"):
        found = []
        for f in sorted((root / part).glob("*.tfrecord")) if (root / part).exists() else []:
            for record in tf.data.TFRecordDataset(str(f)):
                ctx = tf.io.parse_single_sequence_example(record, context_features=context)[0]
                found.append((ctx["machine"].numpy().decode(), int(ctx["window_start"]) - origin,
                              int(ctx["window_end"]) - origin))
        windows[part] = sorted(found)
    return json.loads((root / "_meta" / "manifest.json").read_text()), windows


def starts(windows: list[tuple[str, int, int]], machine: str) -> list[int]:
    return [s for m, s, _ in windows if m == machine]


def test_each_asset_is_cut_at_fractions_of_its_own_span_and_no_window_spans_two_splits(spark, readings, tmp_path):
    manifest, windows = prepared(spark, readings, tmp_path / "ds", "prepare.split.eval_fraction=0.2",
                                 "prepare.split.test_fraction=0.2")
    # span 0..599 s: eval from 359.4 s, test from 479.2 s; windows start every 25 s and last 50 s
    for m in (f"m{i}" for i in range(MACHINES)):
        assert starts(windows["train"], m) == list(range(0, 301, 25))  # end before 359.4
        assert starts(windows["eval"], m) == [375, 400, 425]  # start at or after 359.4, end before 479.2
        assert starts(windows["test"], m) == [500, 525, 550]
    splits = manifest["splits"]
    assert {s: splits[s]["records"] for s in splits} == {"train": 39, "eval": 9, "test": 9}
    assert manifest["windows"]["dropped_by_reason"]["split_boundary"] == 3 * 4  # 325, 350, 450, 475
    assert manifest["windows"]["kept"] + manifest["windows"]["dropped"] == MACHINES * 23
    assert manifest["split"]["mode"] == "time" and manifest["split"]["test_fraction"] == 0.2


def test_one_instant_for_every_asset(spark, readings, tmp_path):
    eval_from = (START + pd.Timedelta(seconds=300)).isoformat()
    manifest, windows = prepared(spark, readings, tmp_path / "ds", f"prepare.split.eval_from={eval_from}")
    for m in (f"m{i}" for i in range(MACHINES)):
        assert starts(windows["train"], m) == list(range(0, 251, 25))
        assert starts(windows["eval"], m) == list(range(300, 551, 25))
    assert windows["test"] == [] and "test" not in manifest["splits"]
    assert manifest["windows"]["dropped_by_reason"]["split_boundary"] == MACHINES  # the window starting at 275 s
    assert max(e for _, _, e in windows["train"]) < 300 <= min(s for _, s, _ in windows["eval"])


def test_an_instant_after_the_data_leaves_eval_empty_and_prepare_names_it(spark, readings, tmp_path):
    late = (START + pd.Timedelta(days=2)).isoformat()
    with pytest.raises(InputError, match=r'prepare.split \(mode = "time", eval_from = .2026-03-03T00:00:00.\): no '
                                         r"usable window is 'eval' \(3 assets with train windows, 0 with eval windows\)"):
        prepared(spark, readings, tmp_path / "ds", f"prepare.split.eval_from={late}")
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("sets, message", [
    (["prepare.split.eval_from=yesterday"], "prepare.split.eval_from: 'yesterday' is not an ISO date-time"),
    (["prepare.split.eval_from=2026-03-02", "prepare.split.test_from=2026-03-01"],
     "prepare.split.eval_from: '2026-03-02' must come before test_from '2026-03-01'"),
    (["prepare.split.test_from=2026-03-01"], "prepare.split.test_from: needs eval_from"),
    (["prepare.split.test_fraction=0.8"], "prepare.split.test_fraction: must be in [0, 1) and leave train a part"),
])
def test_time_split_settings_are_checked_before_any_job(sets, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        config.load(SENSORS, ["prepare.split.mode=time", *sets])


def test_rows_are_not_split_by_time():
    with pytest.raises(ConfigError, match="prepare.split.mode: 'time' splits sensor windows"):
        config.load(ROOT / "conf" / "census.toml", ["prepare.split.mode=time"])
