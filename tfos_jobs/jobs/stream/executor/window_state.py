"""Sensor windows on a stream: each asset's recent readings kept in Spark's state, cut into the
windows batch preparation would cut from the same readings (`data.windows.cut`, with the grid
origin and the windows already emitted fixed in the state).

A window is emitted once it can no longer change: a reading at or after its last step has arrived (so a trailing run of
missing steps is known), and the watermark has passed its last step (so no reading inside it is still on its way). The
state keeps what the next windows need: the readings from the next window's start, and the `fill_limit + 1` before it
that carry values and gaps into it. A reading for a window already emitted is `late`; a second reading of the same step
a `duplicate`; both are returned for the quarantine, never dropped.

`advance` is plain pandas and numpy (tested without Spark); `state_function` wraps it for
`applyInPandasWithState`, capturing plain values only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from tfos_jobs.contracts import stream as contract
from tfos_jobs.data.columns import DROP_REASON, PROBLEM
from tfos_jobs.data.windows import WindowParams, cut, window_columns
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START, FeatureSpec

# Input columns besides the key, the time (epoch seconds) and the sensors (floats, NaN for null).
ARRIVED, RAW = contract.EVENT_TIMESTAMP, contract.RAW  # Kafka timestamp (ms), the event's text
# The readings travel as raw little-endian numbers (numpy's bytes, no pickling): a state of
# arrays fails in pyspark 4.3's Python worker, which cannot read an array type's schema back.
STATE_SCHEMA = "origin LONG, next_start LONG, emitted_until LONG, times BINARY, `values` BINARY, arrived BINARY"


@dataclass(frozen=True)
class Buffer:
    """One asset's state: the grid origin (fixed with the first window emitted), the grid step
    of the next window to emit and of the last emitted window's end, and the kept readings
    (sorted by time; values [rows, sensors], NaN for null; Kafka timestamps in ms)."""

    origin: int | None
    next_start: int
    emitted_until: int
    times: np.ndarray
    values: np.ndarray
    arrived: np.ndarray

    @classmethod
    def empty(cls, sensors: int) -> "Buffer":
        return cls(None, 0, -1, np.zeros(0, np.int64), np.zeros((0, sensors)), np.zeros(0, np.int64))

    def to_state(self) -> tuple[Any, ...]:
        return (self.origin, self.next_start, self.emitted_until, self.times.astype("<i8").tobytes(),
                self.values.astype("<f8").tobytes(), self.arrived.astype("<i8").tobytes())

    @classmethod
    def from_state(cls, state: tuple[Any, ...], sensors: int) -> "Buffer":
        origin, next_start, emitted_until, times, values, arrived = state
        return cls(None if origin is None else int(origin), int(next_start), int(emitted_until),
                   np.frombuffer(bytes(times), "<i8").astype(np.int64),
                   np.frombuffer(bytes(values), "<f8").astype(np.float64).reshape(-1, sensors),
                   np.frombuffer(bytes(arrived), "<i8").astype(np.int64))


def advance(buffer: Buffer, key: Any, new: pd.DataFrame, watermark_ms: int, p: WindowParams
            ) -> tuple[Buffer, pd.DataFrame, pd.DataFrame]:
    """(the asset's next state, the windows now complete (with `_drop_reason`, as batch's), the
    readings set aside: late or duplicate, with why)."""
    times = new[p.time].to_numpy(np.int64)
    values = new[list(p.sensors)].to_numpy(np.float64)
    arrived = new[ARRIVED].to_numpy(np.int64)
    raw = new[RAW].to_numpy(object) if RAW in new else np.full(len(new), None, object)
    reasons = np.full(len(new), None, object)
    if buffer.origin is not None:
        late = _steps(times, buffer.origin, p) <= buffer.emitted_until
        reasons[late] = contract.Reason.LATE.value
    fresh = reasons == None  # noqa: E711 (elementwise)
    candidates = np.concatenate([buffer.times, times[fresh]])
    origin = buffer.origin if buffer.origin is not None or not candidates.size else int(candidates.min())
    if origin is not None and fresh.any():
        # A step held already, or met earlier (by arrival) in this batch, is a duplicate: batch
        # preparation refuses an asset with one.
        by_arrival = np.flatnonzero(fresh)[np.argsort(arrived[fresh], kind="stable")]
        steps = np.concatenate([_steps(buffer.times, origin, p), _steps(times[by_arrival], origin, p)])
        _, first_seen = np.unique(steps, return_index=True)
        repeated = np.ones(len(steps), bool)
        repeated[first_seen] = False
        reasons[by_arrival[repeated[len(buffer.times):]]] = contract.Reason.DUPLICATE.value
    take = reasons == None  # noqa: E711 (elementwise)
    rejected = _rejected(key, times, raw, arrived, reasons, p)

    merged_times = np.concatenate([buffer.times, times[take]])
    order = np.argsort(merged_times, kind="stable")
    merged = Buffer(buffer.origin, buffer.next_start, buffer.emitted_until, merged_times[order],
                    np.concatenate([buffer.values, values[take]])[order],
                    np.concatenate([buffer.arrived, arrived[take]])[order])
    # The last grid step whose time the watermark has passed: nothing inside it can still arrive.
    until = -1 if origin is None else (watermark_ms - origin * 1000 - 1) // (p.step_seconds * 1000)
    if origin is None or until < merged.next_start + p.window - 1:
        return merged, pd.DataFrame(), rejected
    rows = pd.DataFrame({p.key: [key] * len(merged.times), p.time: merged.times,
                         **{s: merged.values[:, j] for j, s in enumerate(p.sensors)}})
    windows = cut(rows, p, origin=origin, first=merged.next_start, until=int(until)).drop(columns=[PROBLEM])
    if windows.empty:
        return merged, windows, rejected
    steps = _steps(merged.times, origin, p)
    first = (windows[WINDOW_START].to_numpy(np.int64) - origin) // p.step_seconds
    last = (windows[WINDOW_END].to_numpy(np.int64) - origin) // p.step_seconds
    # a window's Kafka time: when the last of the readings up to its end arrived
    through = np.searchsorted(steps, last, "right")
    windows[ARRIVED] = np.maximum.accumulate(merged.arrived)[through - 1]
    next_start = int(first[-1]) + p.stride
    keep_from = max(int(np.searchsorted(steps, next_start, "left")) - (p.fill_limit + 1), 0)
    kept = Buffer(origin, next_start, int(last[-1]), merged.times[keep_from:], merged.values[keep_from:],
                  merged.arrived[keep_from:])
    return kept, windows, rejected


def _steps(times: np.ndarray, origin: int, p: WindowParams) -> np.ndarray:
    return np.rint((times - origin) / p.step_seconds).astype(np.int64)


def _rejected(key: Any, times: np.ndarray, raw: np.ndarray, arrived: np.ndarray, reasons: np.ndarray,
              p: WindowParams) -> pd.DataFrame:
    out = reasons != None  # noqa: E711 (elementwise)
    detail = {contract.Reason.LATE.value: f"its window of {p.key} {key!r} was already scored",
              contract.Reason.DUPLICATE.value: f"{p.key} {key!r} has a reading on this step of {p.step_seconds} s "
                                               "already"}
    return pd.DataFrame({p.key: [key] * int(out.sum()), contract.READING_TIME: times[out],
                         contract.REASON: reasons[out], contract.DETAIL: [detail[r] for r in reasons[out]],
                         RAW: raw[out], ARRIVED: arrived[out]})


def output_schema(spec: FeatureSpec) -> str:
    """The state function's rows: windows (bounds set) and readings set aside (reason set)."""
    return (f"{window_columns(spec)}, {DROP_REASON} STRING, {contract.EVENT_TIMESTAMP} LONG, "
            f"{contract.READING_TIME} LONG, {contract.REASON} STRING, {contract.DETAIL} STRING, {contract.RAW} STRING")


def state_function(p: WindowParams, idle_ms: int) -> Callable[..., Iterator[pd.DataFrame]]:
    """The function of `applyInPandasWithState` (processing-time timeout `idle_ms`: an asset
    whose readings stopped still gets its complete windows out as the watermark moves)."""
    columns = [p.key, WINDOW_START, WINDOW_END, *p.sensors, DROP_REASON, contract.EVENT_TIMESTAMP,
               contract.READING_TIME, contract.REASON, contract.DETAIL, contract.RAW]
    nothing = pd.DataFrame({p.time: pd.Series(dtype=np.int64), **{s: pd.Series(dtype=np.float64) for s in p.sensors},
                            ARRIVED: pd.Series(dtype=np.int64), RAW: pd.Series(dtype=object),
                            contract.REASON: pd.Series(dtype=object), contract.DETAIL: pd.Series(dtype=object)})

    def shaped(frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` in the output's columns; a row that is no window holds no sensor arrays."""
        out = frame.reindex(columns=columns)
        for sensor in p.sensors:
            if sensor not in frame.columns:
                out[sensor] = pd.Series([None] * len(out), index=out.index, dtype=object)
        return out

    def apply(key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        buffer = Buffer.from_state(state.get, len(p.sensors)) if state.exists else Buffer.empty(len(p.sensors))
        frames = list(batches)
        new = pd.concat(frames, ignore_index=True) if frames else nothing
        refused = new[contract.REASON].notna()
        if refused.any():  # set aside when parsed: they go out as they came, without their values
            yield shaped(new[refused].drop(columns=list(p.sensors)).rename(columns={p.time: contract.READING_TIME}))
            new = new[~refused]
        buffer, windows, rejected = advance(buffer, key[0], new, state.getCurrentWatermarkMs(), p)
        if buffer.origin is None and not buffer.times.size:  # no reading kept (a key of refused events only)
            if state.exists:
                state.remove()
        else:
            state.update(buffer.to_state())
            state.setTimeoutDuration(idle_ms)
        for out in (windows, rejected):
            if len(out):
                yield shaped(out)

    return apply
