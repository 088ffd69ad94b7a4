"""`tfos stream` (driver side): the streaming query from the Kafka topic to the sinks, run until stopped (SIGINT,
SIGTERM), until it fails, or, with `stream.stop_when_idle_seconds`, once no event has arrived for that long.

Each micro-batch that read events or wrote rows gives one line on the console and one JSON
object in `stream.progress_log` (`contracts.stream` names its fields): events in and their
rates, the batch's duration, the rows in Spark's state, what was scored, set aside, alerted.
A stopped stream started again with the same checkpoint goes on where it stopped.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from tfos_jobs.config import Config
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.serving.error_lines import PYTHON_ERROR_LINE, error_line
from tfos_jobs.jobs.stream.driver import query
from tfos_jobs.jobs.stream.driver.batches import BatchReport, Batches, ModelSlot
from tfos_jobs.session_builder import KAFKA_CONNECTOR
from tfos_jobs.storage import Storage

POLL_SECONDS = 1
QUERY_NAME = "tfos_stream"


@dataclass
class StreamSummary:
    """What a run of `tfos stream` did, from its start to its stop."""

    batches: int = 0
    events: int = 0
    scored: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    alerts: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # the prediction function's counters, summed
    model_versions: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stopped_by: str = ""


def run(spark: SparkSession, config: Config, *, log: Callable[[str], None] = print) -> StreamSummary:
    st = config.stream
    started = time.time()
    slot = ModelSlot(spark, config)
    try:
        table = query.table(spark, config, slot.udf.spec)
    except AnalysisException as e:
        if "kafka" in str(e).lower() and "data source" in str(e).lower():
            raise ConfigError(
                "the Kafka connector is not on the session's class path: start with --packages "
                f"org.apache.spark:{KAFKA_CONNECTOR}_2.13:<Spark version> (or its jars in spark.jars; "
                "`make setup` puts them in tfos_jobs/jars/kafka/ of a source checkout)") from None
        raise TfosError(f"stream: {error_line(e)}") from None
    batches = Batches(config, slot, Storage.as_spark_sees(spark))
    checkpoint = Storage.as_spark_sees(spark).qualify(st.checkpoint)
    running = table.writeStream.queryName(QUERY_NAME).foreachBatch(batches) \
        .option("checkpointLocation", checkpoint).trigger(processingTime=f"{st.trigger_seconds} seconds").start()
    log(f"streaming {st.topic} ({st.bootstrap_servers}) -> {batches.scores.root}, quarantine {batches.quarantine.root}; "
        f"model {slot.udf.version} ({slot.udf.export_dir}); checkpoint {checkpoint}")
    summary = StreamSummary(model_versions=[slot.udf.version])
    summary.stopped_by = _watch(running, batches, summary, config, log)
    summary.seconds = round(time.time() - started, 1)
    log(f"stream stopped ({summary.stopped_by}) after {summary.seconds} s: {summary.batches:,} micro-batches, "
        f"{summary.events:,} events, {summary.scored:,} scored, "
        f"{sum(summary.quarantined.values()):,} quarantined, {summary.alerts:,} alerts")
    return summary


@dataclass
class Liveness:
    """What the watch knows of the query, and when it stops (times: `time.monotonic()`).

    Idle means alive and idle: no event for `idle_seconds` (0: never) while the query went on reporting, between
    micro-batches, that it found nothing new. A query that claims to run but reports nothing between micro-batches for
    `stall_seconds` has lost its thread: stalled, an error, never an idle stop."""

    idle_seconds: float
    stall_seconds: float
    last_event: float  # when the last micro-batch with events (or the first one) was reported
    heard_at: float  # when the newest progress report came
    newest: str = ""  # its timestamp
    quiet: bool = False  # a report of nothing new came after the last event
    batches: set[int] = field(default_factory=set)  # the micro-batches reported

    @classmethod
    def started(cls, idle_seconds: float, trigger_seconds: float, now: float) -> "Liveness":
        """Stalled after max(120 s, 10 triggers) of silence: Spark reports an idle trigger at least every
        10 s (spark.sql.streaming.noDataProgressEventInterval), a micro-batch when it ends."""
        return cls(idle_seconds, max(120.0, 10 * trigger_seconds), last_event=now, heard_at=now)

    def to_report(self, recent: list[StreamingQueryProgress], now: float) -> list[StreamingQueryProgress]:
        """The micro-batches of the query's `recent` reports not reported yet; its newest report,
        when new, is a sign of life (of idleness, if it read nothing)."""
        if recent and str(recent[-1].get("timestamp")) != self.newest:
            self.newest, self.heard_at = str(recent[-1].get("timestamp")), now
            self.quiet = self.quiet or not int(recent[-1].numInputRows or 0)
        first: dict[int, StreamingQueryProgress] = {}  # a micro-batch's own report, not an idle one naming it
        for progress in recent:
            first.setdefault(int(progress["batchId"]), progress)
        return [progress for batch, progress in first.items() if batch not in self.batches]

    def reported(self, batch: int, events: int, now: float) -> None:
        self.batches.add(batch)
        if len(self.batches) == 1 or events:
            self.last_event, self.quiet = now, False

    def stalled(self, now: float, between_batches: bool) -> bool:
        return between_batches and now - self.heard_at > self.stall_seconds

    def idle(self, now: float, between_batches: bool) -> bool:
        return bool(self.idle_seconds and self.batches) and now - self.last_event > self.idle_seconds \
            and self.quiet and between_batches


def _watch(running: StreamingQuery, batches: Batches, summary: StreamSummary, config: Config,
           log: Callable[[str], None]) -> str:
    """Report each micro-batch as it ends; stop on a signal, when idle or failed; stalled is an error."""
    st = config.stream
    live = Liveness.started(st.stop_when_idle_seconds, st.trigger_seconds, time.monotonic())
    signalled: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        signalled.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} \
        if threading.current_thread() is threading.main_thread() else {}
    if st.progress_log:
        os.makedirs(os.path.dirname(os.path.abspath(st.progress_log)), exist_ok=True)
    stopped_by = "the query ended"
    try:
        while running.isActive and not signalled:
            try:
                running.awaitTermination(POLL_SECONDS)
            except StreamingQueryException:
                break  # reported below, from running.exception()
            now = time.monotonic()
            for progress in live.to_report(running.recentProgress, now):
                report = batches.report(int(progress["batchId"]))
                if report is not None:
                    live.reported(report.batch, _report(progress, report, summary, st.progress_log, log), now)
            if running.exception() is not None:
                break
            between_batches = not running.status.get("isTriggerActive")
            if live.stalled(now, between_batches):
                raise TfosError(f"stream: the query has reported nothing for {now - live.heard_at:.0f} s although it "
                                f"is not running a micro-batch (its thread is gone: see the driver's log above); last "
                                f"micro-batch {max(live.batches, default='none')}")
            if live.idle(now, between_batches):
                stopped_by = f"no event for {st.stop_when_idle_seconds:g} s"
                break
    finally:
        _stop_between_batches(running)
        for s, handler in previous.items():
            signal.signal(s, handler)
    failure = running.exception()
    if failure is not None:
        where = f"micro-batch {max(live.batches) + 1}" if live.batches else "its first micro-batch"
        raise TfosError(f"stream: the query failed in {where}: {failure_line(failure)}")
    return signalled[0] if signalled else stopped_by


def _report(progress: StreamingQueryProgress, report: BatchReport, summary: StreamSummary, progress_log: str,
            log: Callable[[str], None]) -> int:
    """A micro-batch that ended: counted, its messages and line printed, its line logged; its events."""
    line = progress_line(progress, report)
    summary.batches += 1
    summary.events += line[contract.INPUT_ROWS]
    summary.scored += report.scored
    summary.alerts += report.alerts
    for r, n in report.quarantined.items():
        summary.quarantined[r] = summary.quarantined.get(r, 0) + n
    for k, n in report.counts.items():
        summary.counts[k] = summary.counts.get(k, 0) + n
    if report.model_version and report.model_version not in summary.model_versions:
        summary.model_versions.append(report.model_version)
    for message in report.messages:
        log(message)
    if line[contract.INPUT_ROWS] or line[contract.SCORED] or line[contract.QUARANTINED]:
        log(describe(line))
        if progress_log:
            with open(progress_log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
    return line[contract.INPUT_ROWS]


def _stop_between_batches(running: StreamingQuery, patience: float = 60.0) -> None:
    """Stop once no micro-batch runs (or after `patience` seconds): stopping a running one
    cancels its jobs mid-write, which is safe (it runs again after a restart) but noisy."""
    deadline = time.monotonic() + patience
    while running.isActive and running.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    if running.isActive:
        running.stop()


def failure_line(e: BaseException) -> str:
    """What failed: a Python worker's exception (its last line) rather than Spark's wrapping of it."""
    raised = [line.strip() for line in str(e).splitlines() if PYTHON_ERROR_LINE.match(line.strip())]
    return raised[-1] if raised else error_line(e)


def progress_line(progress: StreamingQueryProgress, report: BatchReport) -> dict[str, Any]:
    """One micro-batch: Spark's progress (rates, duration, state, watermark) and what it wrote. The aggregate rates are
    read as properties: a Connect client's progress leaves them out of its fields and sums its sources' instead."""
    state = sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators", []))
    return {
        contract.BATCH: report.batch,
        contract.STARTED: progress.get("timestamp"),
        contract.INPUT_ROWS: int(progress.numInputRows or 0),
        contract.INPUT_ROWS_PER_SECOND: round(float(progress.inputRowsPerSecond or 0.0), 1),
        contract.PROCESSED_ROWS_PER_SECOND: round(float(progress.processedRowsPerSecond or 0.0), 1),
        contract.BATCH_MS: int(progress.get("batchDuration", 0)),
        contract.STATE_ROWS: state,
        contract.WATERMARK: progress.get("eventTime", {}).get("watermark"),
        contract.SCORED: report.scored,
        contract.QUARANTINED: sum(report.quarantined.values()),
        contract.QUARANTINED_BY_REASON: report.quarantined,
        contract.ALERTS: report.alerts,
        contract.COUNTS: report.counts,
        contract.MODEL_VERSION: report.model_version,
        contract.SKIPPED: report.skipped,
    }


def describe(line: dict[str, Any]) -> str:
    watermark, watermark_text = line[contract.WATERMARK], ""
    if watermark and not watermark.startswith("1970-"):  # Spark's before the first one
        watermark_text = f", watermark {dt.datetime.fromisoformat(watermark.replace('Z', '+00:00')):%Y-%m-%d %H:%M}"
    skipped = " (written before the restart: skipped)" if line[contract.SKIPPED] else ""
    why = ", ".join(f"{n:,} {r}" for r, n in sorted(line[contract.QUARANTINED_BY_REASON].items()))
    served = ", ".join(f"{k} {n:,}" for k, n in line[contract.COUNTS].items() if k != serving.COUNT_ROWS)
    return (f"micro-batch {line[contract.BATCH]}: {line[contract.INPUT_ROWS]:,} events "
            f"({line[contract.INPUT_ROWS_PER_SECOND]:,.0f}/s in, {line[contract.PROCESSED_ROWS_PER_SECOND]:,.0f}/s "
            f"processed) in {line[contract.BATCH_MS] / 1000:.1f} s; {line[contract.SCORED]:,} scored, "
            f"{line[contract.QUARANTINED]:,} quarantined{f' ({why})' if why else ''}, {line[contract.ALERTS]:,} alerts; "
            f"state {line[contract.STATE_ROWS]:,} rows{watermark_text}{skipped}"
            f"{f'; filled nulls / cut / unseen: {served}' if served else ''}")
