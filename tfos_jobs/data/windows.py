"""Cutting sensor series into windows: one row per window, one array per sensor.

`cut` runs on executors, once per asset (Spark's `applyInPandas` hands it all of one
asset's rows), with plain values only. It is the single implementation of the window rules
of `features.spec.TimeFeature`, used by `prepare`, by the `windows` view of `tfos sql` and by
`tfos predict`, so a model is always scored on windows cut the way it was trained on.

Rows are sorted by time first (input order does not matter) and placed on the grid of
`step_seconds` from the asset's first row. Windows that cannot be used are kept as rows with
a `_drop_reason` (and no values), so that they are counted, never silently lost:
  * `gap`: the window touches a run of more than `max_gap` missing steps;
  * `missing_values`: a sensor stays null after filling forward `fill_limit` steps (or has no
    earlier value to fill from).
Two rows of an asset on the same step are an input error: the asset gets one row with a
`_problem` message naming the file and the column, which the driver raises.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tfos_jobs.data.columns import DROP_REASON, PROBLEM, SOURCE_FILE
from tfos_jobs.features.spec import SPARK_TYPES, WINDOW_END, WINDOW_START, FeatureSpec

GAP = "gap"
MISSING_VALUES = "missing_values"
DROP_REASONS = (GAP, MISSING_VALUES)


@dataclass(frozen=True)
class WindowParams:
    """The plain values `cut` needs, taken from the spec on the driver."""

    key: str
    time: str
    sensors: tuple[str, ...]
    step_seconds: int
    window: int
    stride: int
    max_gap: int
    fill_limit: int

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> "WindowParams":
        t, key = spec.time, spec.key
        assert key is not None  # a sequence spec has one (FeatureSpec.errors)
        return cls(key.name, t.name, tuple(f.name for f in spec.sequences), t.step_seconds, t.window,
                   t.stride, t.max_gap, t.fill_limit)


def window_columns(spec: FeatureSpec) -> str:
    """The DDL of a window's own columns: key, bounds (epoch seconds), one array per sensor."""
    sensors = ", ".join(f"`{f.name}` ARRAY<FLOAT>" for f in spec.sequences)
    key = spec.key
    assert key is not None  # a sequence spec has one (FeatureSpec.errors)
    return f"`{key.name}` {SPARK_TYPES[key.dtype]}, {WINDOW_START} LONG, {WINDOW_END} LONG, {sensors}"


def output_schema(spec: FeatureSpec) -> str:
    """The DDL of `cut`'s rows: the window's columns, drop reason, problem."""
    return f"{window_columns(spec)}, {DROP_REASON} STRING, {PROBLEM} STRING"


def cut(rows: pd.DataFrame, params: WindowParams, *, origin: int | None = None, first: int = 0,
        until: int | None = None) -> pd.DataFrame:
    """The windows of one asset's rows (`time` as epoch seconds, sensors as floats).

    The grid's step 0 is at `origin` (default: the earliest row), and a window starts on every
    `stride`-th step of it. A stream cuts its buffered rows with the origin it fixed and only
    the windows it has not emitted yet: those starting at grid step `first` or later and ending
    at step `until` or earlier. Rows before `first` only carry values and gaps into them."""
    p = params
    key = rows[p.key].iloc[0]
    order = np.argsort(rows[p.time].to_numpy(np.int64), kind="stable")
    seconds = rows[p.time].to_numpy(np.int64)[order]
    values = rows[list(p.sensors)].to_numpy(np.float64)[order]
    zero = int(seconds[0]) if origin is None else origin
    on_grid = np.rint((seconds - zero) / p.step_seconds).astype(np.int64)
    same = np.flatnonzero(on_grid[1:] == on_grid[:-1])
    if same.size:
        first_dupe = same[0] + 1
        where = f"{rows[SOURCE_FILE].to_numpy()[order][first_dupe]}: " if SOURCE_FILE in rows else ""
        when = dt.datetime.fromtimestamp(int(seconds[first_dupe]), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return _problem(p, key, f"{where}column {p.time!r} has {same.size} duplicate timestamp(s) for "
                                f"{p.key} {key!r} (on the grid of {p.step_seconds} s), first at {when}")
    offset = int(on_grid[0])  # the grid step of the first row: steps below are relative to it
    steps = on_grid - offset

    # Sensor nulls filled forward over present rows, up to fill_limit in a row.
    m, d = values.shape
    idx = np.arange(m)[:, None]
    last = np.maximum.accumulate(np.where(~np.isnan(values), idx, -1), axis=0)
    usable = (last >= 0) & (idx - last <= p.fill_limit)
    filled = np.where(usable, values[np.maximum(last, 0), np.arange(d)], np.nan)

    # On the grid: a missing step takes the row before it; a gap longer than max_gap is marked.
    n = int(steps[-1]) + 1
    present = np.zeros(n, dtype=bool)
    present[steps] = True
    row_at = np.cumsum(present) - 1  # the row on each step, or the last one before it
    grid = filled[row_at]  # [n, d]
    missing_after = np.append(np.diff(steps) - 1, 0)  # each row's: the steps missing after it
    in_gap = ~present & (missing_after[row_at] > p.max_gap)

    lowest = max(first, offset)
    begin = -(-lowest // p.stride) * p.stride  # the first grid step on the stride at or after `lowest`
    last_end = n - 1 if until is None else min(n - 1, until - offset)
    starts = np.arange(begin - offset, last_end - p.window + 2, p.stride)
    if starts.size == 0:
        return pd.DataFrame(columns=_columns(p))
    ends = starts + p.window
    gap_count = np.concatenate([[0], np.cumsum(in_gap)])
    nan_count = np.concatenate([[0], np.cumsum(np.isnan(grid).any(axis=1))])
    gap = gap_count[ends] - gap_count[starts] > 0
    nulls = nan_count[ends] - nan_count[starts] > 0
    # None is a valid (object) scalar, which numpy's stubs do not accept
    reason = np.where(gap, GAP, np.where(nulls, MISSING_VALUES, None))  # type: ignore[call-overload]
    kept = reason == None  # noqa: E711 (elementwise)
    views = np.lib.stride_tricks.sliding_window_view(grid, p.window, axis=0)[starts]  # [w, d, window]
    views = views.astype(np.float32)
    out = {
        p.key: [key] * starts.size,
        WINDOW_START: zero + (starts + offset) * p.step_seconds,
        WINDOW_END: zero + (ends - 1 + offset) * p.step_seconds,
    }
    for j, sensor in enumerate(p.sensors):
        out[sensor] = [views[i, j] if kept[i] else None for i in range(starts.size)]
    out[DROP_REASON] = reason
    out[PROBLEM] = None
    return pd.DataFrame(out, columns=_columns(p))


def _columns(p: WindowParams) -> list[str]:
    return [p.key, WINDOW_START, WINDOW_END, *p.sensors, DROP_REASON, PROBLEM]


def _problem(p: WindowParams, key, message: str) -> pd.DataFrame:
    row: dict[str, list[object]] = {c: [None] for c in _columns(p)}
    row[p.key] = [key]
    row[PROBLEM] = [message]
    return pd.DataFrame(row, columns=_columns(p))


def all_windows(rows: DataFrame, spec: FeatureSpec) -> DataFrame:
    """Every window of every asset in `rows` (key, time as a timestamp, sensors, optionally
    `_source_file`), kept and dropped ones; lazy."""
    params = WindowParams.from_spec(spec)
    wanted: list[Column | str] = [params.key, F.col(params.time).cast("long").alias(params.time),
                                  *[F.col(s).cast("double").alias(s) for s in params.sensors]]
    if SOURCE_FILE in rows.columns:
        wanted.append(SOURCE_FILE)

    def cut_group(group: pd.DataFrame) -> pd.DataFrame:  # a plain function: Spark reads its type hints
        return cut(group, params=params)

    return rows.select(*wanted).groupBy(params.key).applyInPandas(cut_group, output_schema(spec))


def usable(windows: DataFrame) -> DataFrame:
    """The windows a model trains on or scores: not dropped. An input problem fails the query
    that meets it, with its message (naming the file and column), rather than vanishing."""
    ok = F.when(F.col(PROBLEM).isNotNull(), F.raise_error(F.col(PROBLEM))).otherwise(F.col(DROP_REASON).isNull())
    return windows.where(ok).drop(DROP_REASON, PROBLEM)


def as_timestamps(windows: DataFrame) -> DataFrame:
    """Window bounds as timestamps, for people (records keep epoch seconds)."""
    return windows.withColumn(WINDOW_START, F.timestamp_seconds(WINDOW_START)) \
        .withColumn(WINDOW_END, F.timestamp_seconds(WINDOW_END))
