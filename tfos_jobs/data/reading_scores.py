"""Window scores as reading scores, for the figures defined on readings (VUS, `data.vus`): the field's benchmarks
label and score each reading of a series, while `tfos predict` scores windows of `window` readings, one every
`stride`.

A window covers the readings from its `window_start` to its `window_end` (inclusive), one every `step_seconds`; a
reading is scored by the highest score of the windows covering it (an alarm raised over a window is raised for each
of its readings), and a reading no window covers is not judged at all: the series is the covered readings in time
order. A reading is anomalous when it lies in an interval of the truth table (start and end inclusive).
"""
from __future__ import annotations

import numpy as np

NANOS = "datetime64[ns]"


def from_windows(starts: np.ndarray, ends: np.ndarray, scores: np.ndarray,
                 step_seconds: int) -> tuple[np.ndarray, np.ndarray]:
    """(times, scores): the readings the windows of one asset cover, in time order, each with the highest score of
    the windows covering it. The windows' bounds lie on one grid of `step_seconds` (as `data.windows` cuts them)."""
    starts, ends = np.asarray(starts, dtype=NANOS), np.asarray(ends, dtype=NANOS)
    scores = np.asarray(scores, dtype=np.float64)
    if not len(starts) == len(ends) == len(scores):
        raise ValueError(f"one start, end and score per window, got {len(starts)}, {len(ends)} and {len(scores)}")
    if len(starts) == 0:
        return np.array([], dtype=NANOS), np.array([], dtype=np.float64)
    step = np.timedelta64(step_seconds, "s")
    origin = starts.min()
    first = np.rint((starts - origin) / step).astype(np.int64)
    lengths = np.rint((ends - origin) / step).astype(np.int64) - first + 1
    if (lengths < 1).any():
        raise ValueError("a window ends before it starts")
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    reading = np.repeat(first, lengths) + offsets  # each window's readings, as steps from the first
    order = np.argsort(reading, kind="stable")
    reading = reading[order]
    distinct = np.flatnonzero(np.concatenate([[True], reading[1:] != reading[:-1]]))
    best = np.maximum.reduceat(np.repeat(scores, lengths)[order], distinct)
    return origin + reading[distinct] * step, best


def in_intervals(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each of the sorted `times` lies in one of the intervals [start, end]."""
    times, starts, ends = (np.asarray(a, dtype=NANOS) for a in (times, starts, ends))
    proper = starts <= ends  # an interval ending before it starts holds no reading
    inside = np.zeros(len(times) + 1, dtype=np.int64)
    np.add.at(inside, np.searchsorted(times, starts[proper], side="left"), 1)
    np.add.at(inside, np.searchsorted(times, ends[proper], side="right"), -1)
    return np.cumsum(inside)[:-1] > 0
