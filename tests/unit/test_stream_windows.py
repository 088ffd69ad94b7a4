"""Windows cut from a stream (`window_state.advance`: readings in micro-batches, out of order
within the watermark) against batch cutting of the same readings (`data.windows.cut`): the same
windows, values, and drop reasons; late and duplicate readings set aside with why."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tfos_jobs.contracts import stream as contract
from tfos_jobs.data.columns import DROP_REASON, PROBLEM
from tfos_jobs.data.windows import GAP, MISSING_VALUES, WindowParams, cut
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START
from tfos_jobs.jobs.stream.executor.window_state import ARRIVED, RAW, Buffer, advance

STEP = 60
T0 = 1_767_225_600
SENSORS = ("a", "b")


def readings(n: int, absent: set[int], nulls_b: set[int], seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    steps = np.array([i for i in range(n) if i not in absent])
    b = rng.normal(size=len(steps))
    b[np.isin(steps, list(nulls_b))] = np.nan
    return pd.DataFrame({"asset": "m1", "ts": T0 + steps * STEP, "a": rng.normal(size=len(steps)), "b": b,
                         ARRIVED: np.arange(len(steps), dtype=np.int64), RAW: [f"r{s}" for s in steps]})


def streamed(rows: pd.DataFrame, params: WindowParams, *, batch: int, delay_s: int, disorder: int, seed: int = 1
             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All windows and set-aside readings of `rows` fed in micro-batches of `batch` readings,
    each reading displaced by up to `disorder` places; the watermark trails the latest time by
    `delay_s`, as Spark's does, and passes everything at the end."""
    rng = np.random.default_rng(seed)
    order = np.argsort(np.arange(len(rows)) + rng.uniform(0, disorder, len(rows)), kind="stable")
    arriving = rows.iloc[order].reset_index(drop=True)
    buffer, windows, rejected = Buffer.empty(len(params.sensors)), [], []
    watermark = 0
    for start in range(0, len(arriving), batch):
        chunk = arriving.iloc[start:start + batch]
        buffer, w, r = advance(buffer, "m1", chunk, watermark, params)
        windows.append(w), rejected.append(r)
        watermark = max(watermark, (int(chunk["ts"].max()) - delay_s) * 1000)  # used by the next batch
    buffer, w, r = advance(buffer, "m1", arriving.iloc[:0], 1 << 62, params)
    windows.append(w), rejected.append(r)
    kept = [w for w in windows if len(w)]
    out = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame()
    return out, pd.concat(rejected, ignore_index=True)


def assert_same_windows(stream: pd.DataFrame, batch: pd.DataFrame) -> None:
    batch = batch.drop(columns=[PROBLEM]).reset_index(drop=True)
    assert stream[WINDOW_START].tolist() == batch[WINDOW_START].tolist()
    assert stream[WINDOW_END].tolist() == batch[WINDOW_END].tolist()
    assert stream[DROP_REASON].tolist() == batch[DROP_REASON].tolist()
    for sensor in SENSORS:
        for got, want in zip(stream[sensor], batch[sensor]):
            if want is None:
                assert got is None
            else:
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("window,stride,batch,disorder", [(8, 8, 7, 5), (8, 4, 13, 9), (6, 3, 1, 0), (8, 8, 400, 30)])
def test_stream_windows_equal_batch_windows(window, stride, batch, disorder):
    params = WindowParams("asset", "ts", SENSORS, STEP, window=window, stride=stride, max_gap=2, fill_limit=2)
    # gaps of 2 (filled) and 4 (a gap), a null run of 2 (filled) and of 3 (missing values)
    rows = readings(200, absent={30, 31, 70, 71, 72, 73}, nulls_b={50, 51, 120, 121, 122})
    stream, rejected = streamed(rows, params, batch=batch, delay_s=disorder * STEP + STEP, disorder=disorder)
    want = cut(rows, params)
    assert {GAP, MISSING_VALUES} <= set(want[DROP_REASON].dropna())  # both rules are exercised
    assert_same_windows(stream, want)
    assert rejected.empty


def test_the_first_reading_may_arrive_after_later_ones_and_still_anchors_the_grid():
    params = WindowParams("asset", "ts", SENSORS, STEP, window=4, stride=4, max_gap=1, fill_limit=1)
    rows = readings(40, absent=set(), nulls_b=set())
    late_first = pd.concat([rows.iloc[1:6], rows.iloc[:1], rows.iloc[6:]], ignore_index=True)
    buffer, w1, _ = advance(Buffer.empty(2), "m1", late_first.iloc[:5], 0, params)
    buffer, w2, _ = advance(buffer, "m1", late_first.iloc[5:], 1 << 62, params)
    assert w1.empty
    assert_same_windows(pd.concat([w2], ignore_index=True), cut(rows, params))


def test_late_and_duplicate_readings_are_set_aside_with_why():
    params = WindowParams("asset", "ts", SENSORS, STEP, window=4, stride=4, max_gap=1, fill_limit=1)
    rows = readings(20, absent=set(), nulls_b=set())
    watermark_after_step_9 = (T0 + 9 * STEP + 1) * 1000
    buffer, windows, _ = advance(Buffer.empty(2), "m1", rows.iloc[:12], watermark_after_step_9, params)
    assert windows[WINDOW_START].tolist() == [T0, T0 + 4 * STEP]  # steps 0-3 and 4-7 are complete
    again = rows.iloc[[2, 11]].assign(**{ARRIVED: [100, 101]})  # step 2: its window is out; step 11: held
    buffer, windows, rejected = advance(buffer, "m1", again, watermark_after_step_9, params)
    assert windows.empty
    assert rejected[contract.REASON].tolist() == [contract.Reason.LATE, contract.Reason.DUPLICATE]
    assert rejected[contract.READING_TIME].tolist() == [T0 + 2 * STEP, T0 + 11 * STEP]
    assert rejected[RAW].tolist() == ["r2", "r11"]
    assert "already scored" in rejected[contract.DETAIL][0] and "'m1'" in rejected[contract.DETAIL][0]


def test_the_state_keeps_only_what_the_next_windows_need():
    params = WindowParams("asset", "ts", SENSORS, STEP, window=8, stride=8, max_gap=2, fill_limit=2)
    rows = readings(1004, absent=set(), nulls_b=set())
    buffer, windows, _ = advance(Buffer.empty(2), "m1", rows, (T0 + 1000 * STEP) * 1000, params)
    assert len(windows) == 125  # steps 0-999; the watermark has not passed step 1000
    assert buffer.next_start == 1000 and buffer.emitted_until == 999
    assert len(buffer.times) == 4 + params.fill_limit + 1  # steps 1000-1003 and the 3 before
    state = Buffer.from_state(buffer.to_state(), 2)
    assert state.origin == T0 and np.array_equal(state.values, buffer.values)


def test_a_window_waits_for_the_watermark_and_for_a_reading_at_its_end():
    params = WindowParams("asset", "ts", SENSORS, STEP, window=4, stride=4, max_gap=1, fill_limit=1)
    rows = readings(4, absent=set(), nulls_b=set())
    _, held, _ = advance(Buffer.empty(2), "m1", rows, (T0 + 3 * STEP) * 1000, params)  # step 3 not passed
    assert held.empty
    buffer, out, _ = advance(Buffer.empty(2), "m1", rows.iloc[:3], 1 << 62, params)  # no reading at step 3 yet
    assert out.empty
    _, out, _ = advance(buffer, "m1", rows.iloc[3:], 1 << 62, params)
    assert out[WINDOW_START].tolist() == [T0] and out[ARRIVED].tolist() == [3]
