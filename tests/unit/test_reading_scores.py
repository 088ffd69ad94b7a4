"""Window scores as reading scores: each reading gets the highest score of the windows covering it; a reading no
window covers is not judged; a reading is anomalous inside a truth interval. No Spark."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tfos_jobs.data import reading_scores

T0 = np.datetime64("2026-01-01T00:00:00", "ns")


def at(*seconds: int) -> np.ndarray:
    return T0 + np.array(seconds, dtype="timedelta64[s]")


def test_a_reading_takes_the_highest_score_of_the_windows_covering_it_and_gaps_are_left_out():
    # readings every 10 s; windows of 4 readings, one every 2 (overlapping), then a gap, then one alone
    starts = at(0, 20, 40, 100)
    ends = at(30, 50, 70, 130)
    times, scores = reading_scores.from_windows(starts, ends, np.array([0.5, 0.2, 0.9, 0.1]), step_seconds=10)
    assert times.tolist() == at(0, 10, 20, 30, 40, 50, 60, 70, 100, 110, 120, 130).tolist()  # 80, 90 covered by none
    assert scores.tolist() == [0.5, 0.5, 0.5, 0.5, 0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1]


def test_windows_in_any_order_and_on_pandas_timestamps_give_the_same_readings():
    frame = pd.DataFrame({"start": pd.to_datetime(["2026-01-01 00:00:04", "2026-01-01 00:00:00",
                                                   "2026-01-01 00:00:02"]),
                          "score": [3.0, 1.0, 2.0]})
    frame["end"] = frame["start"] + pd.Timedelta(seconds=3)
    times, scores = reading_scores.from_windows(frame["start"].to_numpy(), frame["end"].to_numpy(),
                                                frame["score"].to_numpy(), step_seconds=1)
    assert times.tolist() == at(0, 1, 2, 3, 4, 5, 6, 7).tolist()
    assert scores.tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]


def test_no_window_no_reading_and_a_window_ending_before_it_starts_is_refused():
    times, scores = reading_scores.from_windows(at(), at(), np.array([]), step_seconds=1)
    assert len(times) == 0 and len(scores) == 0
    with pytest.raises(ValueError, match="ends before it starts"):
        reading_scores.from_windows(at(10), at(5), np.array([1.0]), step_seconds=1)


def test_a_reading_is_anomalous_inside_an_interval_ends_included():
    times = at(0, 10, 20, 30, 40, 50, 60)
    inside = reading_scores.in_intervals(times, at(10, 25, 45, 100), at(20, 30, 45, 90))
    # [10, 20] holds 10 and 20; [25, 30] holds 30; [45, 45] holds none; the last ends before it starts
    assert inside.tolist() == [False, True, True, True, False, False, False]
    assert reading_scores.in_intervals(times, at(5, 15), at(40, 25)).tolist() == [False, True, True, True, True,
                                                                                  False, False]  # overlapping
