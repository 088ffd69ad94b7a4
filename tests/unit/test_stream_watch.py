"""How `tfos stream` watches its query, without Kafka or Spark: when it is idle (alive, and
reporting nothing new), when it is stalled (claiming to run but reporting nothing), and what
the watch reports and returns on each, against a query played by a test double."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tfos_jobs.contracts import stream as contract
from tfos_jobs.errors import TfosError
from tfos_jobs.jobs.stream.driver import job
from tfos_jobs.jobs.stream.driver.batches import BatchReport
from tfos_jobs.jobs.stream.driver.job import Liveness

IDLE, STALL = 30.0, 120.0


class Progress(dict):
    """A progress report as `recentProgress` gives it: fields by key, the input rate as properties."""

    def __init__(self, batch: int, timestamp: str, rows: int):
        super().__init__(batchId=batch, timestamp=timestamp, batchDuration=500)
        self.numInputRows, self.inputRowsPerSecond, self.processedRowsPerSecond = rows, float(rows), float(rows)


def started(at: float = 0.0) -> Liveness:
    return Liveness(IDLE, STALL, last_event=at, heard_at=at)


def seen(live: Liveness, now: float, *recent: Progress, report: bool = True) -> list[int]:
    """The micro-batches to report when the query's recent reports are `recent` at `now`,
    reported (with their events) when `report`."""
    new = live.to_report(list(recent), now)
    for progress in new if report else []:
        live.reported(progress["batchId"], progress.numInputRows, now)
    return [progress["batchId"] for progress in new]


def test_idle_needs_a_report_of_nothing_new_after_the_last_event_and_the_time_between_batches():
    live = started()
    assert not live.idle(1000.0, True)  # no micro-batch yet: never idle, however long
    assert seen(live, 5.0, Progress(0, "t0", 50)) == [0]
    assert not live.idle(5.0 + IDLE + 1, True)  # no report of nothing new has come since
    assert seen(live, 7.0, Progress(0, "t0", 50), Progress(0, "t1", 0)) == []  # nothing new
    assert not live.idle(5.0 + IDLE - 1, True)  # not long enough
    assert not live.idle(5.0 + IDLE + 1, False)  # a micro-batch is running
    assert live.idle(5.0 + IDLE + 1, True)
    assert seen(live, 40.0, Progress(1, "t2", 20)) == [1]  # events again: the time counts from there
    assert not live.idle(5.0 + IDLE + 1, True) and not live.idle(40.0 + IDLE + 1, True)
    seen(live, 42.0, Progress(1, "t3", 0))
    assert live.idle(40.0 + IDLE + 1, True)
    assert seen(live, 50.0, Progress(2, "t4", 0)) == [2]  # a micro-batch without events changes nothing
    assert live.idle(40.0 + IDLE + 1, True)
    seen(live, 52.0, Progress(3, "t5", 9), report=False)  # events only count once their micro-batch is reported
    assert live.idle(40.0 + IDLE + 1, True)
    assert not Liveness(0.0, STALL, last_event=0.0, heard_at=0.0).idle(1e6, True)  # 0: never idle
    empty_start = started()  # the first micro-batch, with events or not, starts the time
    seen(empty_start, 5.0, Progress(0, "t0", 0))
    seen(empty_start, 6.0, Progress(0, "t1", 0))
    assert not empty_start.idle(IDLE + 1, True) and empty_start.idle(5.0 + IDLE + 1, True)


def test_stalled_is_silence_between_batches_and_any_new_report_ends_it():
    live = started()
    assert not live.stalled(STALL - 1, True)
    assert not live.stalled(STALL + 1, False)  # a micro-batch may run longer than that
    assert live.stalled(STALL + 1, True)
    assert seen(live, 100.0, Progress(0, "t1", 0), report=False) == [0]  # not reported yet: seen again
    assert not live.stalled(STALL + 1, True) and live.stalled(100.0 + STALL + 1, True)
    assert seen(live, 200.0, Progress(0, "t1", 0)) == [0]  # the same report again is no sign of life
    assert live.stalled(100.0 + STALL + 1, True)
    assert seen(live, 201.0, Progress(0, "t1", 0)) == []  # a micro-batch is reported once
    assert seen(live, 202.0, Progress(1, "t2", 5), Progress(1, "t3", 0)) == [1]  # even when two reports name it
    assert [Liveness.started(IDLE, trigger, 0.0).stall_seconds for trigger in (2.0, 30.0)] == [120.0, 300.0]


class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Query:
    """A streaming query that goes through `script`, one entry per poll: the reports it has by
    then, whether a micro-batch runs, and whether it has failed."""

    def __init__(self, clock: Clock, script: list[tuple[list[Progress], bool, Exception | None]]):
        self.clock, self.script, self.polls, self.stopped = clock, script, 0, False
        self.recentProgress: list[Progress] = []
        self.status: dict[str, bool] = {"isTriggerActive": False}
        self.failure: Exception | None = None

    @property
    def isActive(self) -> bool:
        return not self.stopped

    def awaitTermination(self, seconds: float) -> None:
        self.clock.now += seconds
        step = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        self.recentProgress, self.status, self.failure = step[0], {"isTriggerActive": step[1]}, step[2]

    def exception(self) -> Exception | None:
        return self.failure

    def stop(self) -> None:
        self.stopped = True


class Batches:
    def report(self, batch: int) -> BatchReport:
        return BatchReport(batch, scored=10 * batch, model_version="v1", messages=[f"alert in {batch}"])


def watch(monkeypatch, tmp_path, script, idle: float = IDLE) -> tuple[Query, list[str], str]:
    clock = Clock()
    monkeypatch.setattr(job, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    query, lines = Query(clock, script), []
    stream = SimpleNamespace(progress_log=str(tmp_path / "progress.jsonl"), trigger_seconds=2.0,
                             stop_when_idle_seconds=idle)
    summary = job.StreamSummary()
    stopped_by = job._watch(query, Batches(), summary, SimpleNamespace(stream=stream), lines.append)
    assert summary.batches == len({p["batchId"] for step in script for p in step[0]})
    return query, lines, stopped_by


def test_the_watch_reports_each_micro_batch_once_and_stops_when_idle(monkeypatch, tmp_path):
    first, second, empty = Progress(0, "t0", 40), Progress(1, "t1", 60), Progress(2, "t2", 0)
    script = [([], True, None), ([first], False, None), ([first, second], False, None),
              ([first, second, empty, Progress(2, "t3", 0)], False, None)]  # an idle report naming micro-batch 2
    query, lines, stopped_by = watch(monkeypatch, tmp_path, script)
    assert stopped_by == "no event for 30 s" and query.stopped
    assert query.polls == 3 + int(IDLE) + 1  # the last event came on poll 3
    assert [line for line in lines if not line.startswith("micro-batch")] == ["alert in 0", "alert in 1", "alert in 2"]
    described = [line for line in lines if line.startswith("micro-batch")]
    assert len(described) == 3 and described[1].startswith("micro-batch 1: 60 events") and "10 scored" in described[1]
    logged = (tmp_path / "progress.jsonl").read_text().splitlines()
    assert [json.loads(line)[contract.INPUT_ROWS] for line in logged] == [40, 60, 0]


def test_a_query_silent_between_batches_is_an_error_not_an_idle_stop(monkeypatch, tmp_path):
    script = [([Progress(0, "t0", 40)], False, None)]
    with pytest.raises(TfosError, match=r"reported nothing for 121 s although it is not running a micro-batch .*"
                                        r"last micro-batch 0$"):
        watch(monkeypatch, tmp_path, script, idle=1000.0)


def test_a_failed_query_names_the_micro_batch_it_failed_in(monkeypatch, tmp_path):
    script = [([Progress(0, "t0", 40)], False, None), ([Progress(0, "t0", 40)], False, RuntimeError("boom"))]
    with pytest.raises(TfosError, match=r"^stream: the query failed in micro-batch 1: .*boom"):
        watch(monkeypatch, tmp_path, script)
