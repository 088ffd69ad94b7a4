"""Window cutting on hand-built series whose windows are known (no Spark: `cut` is the
per-asset function the executors run), and the spec rules for sequence features."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tfos_jobs.config import from_dict
from tfos_jobs.data.columns import DROP_REASON, PROBLEM, SOURCE_FILE
from tfos_jobs.data.windows import GAP, MISSING_VALUES, WindowParams, cut
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START

STEP = 60
PARAMS = WindowParams("asset", "ts", ("a", "b"), STEP, window=4, stride=4, max_gap=1, fill_limit=1)


def series(n: int = 20, absent: tuple[int, ...] = (), nulls_b: tuple[int, ...] = ()) -> pd.DataFrame:
    steps = np.array([i for i in range(n) if i not in absent])
    a = steps.astype(float)
    b = steps * 2.0
    b[np.isin(steps, nulls_b)] = np.nan
    return pd.DataFrame({"asset": "x", "ts": 1_767_225_600 + steps * STEP, "a": a, "b": b,
                         SOURCE_FILE: "file:/data/x.parquet"})


def test_gaps_and_nulls_decide_which_windows_are_kept():
    # step 5 missing (1 <= max_gap: filled), steps 10-12 missing (3 > max_gap: a gap),
    # b null at 16 (filled) and 17 (second in a row > fill_limit: missing values)
    out = cut(series(absent=(5, 10, 11, 12), nulls_b=(16, 17)), PARAMS)
    assert out[WINDOW_START].tolist() == [1_767_225_600 + s * STEP for s in (0, 4, 8, 12, 16)]
    assert (out[WINDOW_END] - out[WINDOW_START]).tolist() == [3 * STEP] * 5
    assert out[DROP_REASON].tolist() == [None, None, GAP, GAP, MISSING_VALUES]
    np.testing.assert_array_equal(out["a"][0], [0, 1, 2, 3])
    np.testing.assert_array_equal(out["a"][1], [4, 4, 6, 7])  # step 5 takes step 4's value
    np.testing.assert_array_equal(out["b"][1], [8, 8, 12, 14])
    assert out["a"][2] is None and out["b"][4] is None  # dropped windows carry no values
    assert out[PROBLEM].isna().all()


def test_a_null_run_within_fill_limit_is_filled_forward():
    out = cut(series(n=8, nulls_b=(5,)), PARAMS)
    assert out[DROP_REASON].tolist() == [None, None]
    np.testing.assert_array_equal(out["b"][1], [8, 8, 12, 14])


def test_no_earlier_value_to_fill_from_drops_the_window():
    out = cut(series(n=8, nulls_b=(0,)), PARAMS)
    assert out[DROP_REASON].tolist() == [MISSING_VALUES, None]


def test_row_order_does_not_matter():
    rows = series(absent=(5,), nulls_b=(9,))
    shuffled = rows.sample(frac=1.0, random_state=3).reset_index(drop=True)
    pd.testing.assert_frame_equal(cut(shuffled, PARAMS), cut(rows, PARAMS))


def test_stride_shorter_than_the_window_overlaps_windows():
    params = WindowParams("asset", "ts", ("a", "b"), STEP, window=4, stride=2, max_gap=0, fill_limit=0)
    out = cut(series(n=10), params)
    assert [int(w[0]) for w in out["a"]] == [0, 2, 4, 6]


def test_a_series_shorter_than_one_window_has_no_windows():
    assert len(cut(series(n=3), PARAMS)) == 0


def test_duplicate_timestamps_are_a_problem_naming_the_file_and_column():
    rows = series(n=8)
    rows = pd.concat([rows, rows.iloc[[3]]], ignore_index=True)
    out = cut(rows, PARAMS)
    assert len(out) == 1
    message = out[PROBLEM][0]
    assert "file:/data/x.parquet" in message and "column 'ts'" in message and "1 duplicate" in message
    assert "2026-01-01 00:03:00 UTC" in message


FLEET_FEATURES = {
    "asset_id": {"kind": "key", "dtype": "string"},
    "ts": {"kind": "time", "window": 8, "stride": 8},
    "temperature": {"kind": "sequence"},
}
SOURCES = {"s": {"format": "parquet", "path": "/data"}}


def config(features: dict, **train_model) -> object:
    return from_dict({"features": features, "sources": SOURCES, "prepare": {"main": "s", "output": "/out"},
                      "train": {"model": {"kind": "sequence_autoencoder", **train_model}}})


def test_a_fleet_spec_needs_no_label_and_describes_its_records():
    spec = config(FLEET_FEATURES).features
    assert spec.is_sequence and spec.model_inputs == ("asset_id", "temperature")  # the key: per-asset statistics
    records = spec.record_schema()
    assert records["temperature"] == {"dtype": "float32", "shape": [8], "default": None, "part": "feature_list"}
    assert records[WINDOW_START]["part"] == "context" and records["asset_id"]["dtype"] == "string"


@pytest.mark.parametrize("change, message", [
    ({"ts": None}, "one with kind = \"time\""),
    ({"age": {"kind": "numeric"}}, "sequence features take no numeric features"),
    ({"ts": {"kind": "time", "window": 0}}, "features.ts.window: must be >= 1"),
    ({"ts": {"kind": "time", "max_gap": -1}}, "features.ts.max_gap: must be >= 0"),
])
def test_fleet_spec_errors_name_the_key(change, message):
    features = {k: v for k, v in {**FLEET_FEATURES, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        config(features)


def test_the_model_kind_must_fit_the_spec():
    with pytest.raises(ConfigError, match="does not fit a spec of sequence features"):
        from_dict({"features": FLEET_FEATURES, "sources": SOURCES, "prepare": {"main": "s", "output": "/out"}})
    with pytest.raises(ConfigError, match="anomaly_quantile: must be between 0 and 1"):
        config(FLEET_FEATURES, anomaly_quantile=1.0)
