"""Watching one attempt's TF nodes to their end, wherever they run.

The supervisor reads what the nodes report (`RunState`) and what their runner knows of them
(`NodeJob`: Spark tasks for a TF cluster, threads in a test), and ends the attempt:
  * when the nodes do not all start within `train.reservation_timeout`;
  * at once when any node fails, with the node's own traceback (a retried TF node joins the
    next attempt, not this one);
  * when no step finishes for `train.step_timeout` (a hang: retriable);
  * on `stop` (a sweep's pruner or time budget).
A parameter-server worker lost with its executor is tolerated while others remain.
"""
from __future__ import annotations

import time
from typing import Callable, Protocol

from tfos_jobs import control_channel
from tfos_jobs.cluster.driver.failure_policy import failure_message, retriable
from tfos_jobs.cluster.driver.launcher import Attempt, Watch
from tfos_jobs.cluster.driver.run_state import RESERVED, RunState
from tfos_jobs.config import TrainConfig
from tfos_jobs.errors import TrainingError
from tfos_jobs.topology import Strategy

POLL = 0.5


class NodeJob(Protocol):
    """The nodes of one attempt as their runner sees them."""

    def running(self) -> bool:
        """Whether any node's task is still running."""

    def wait(self, seconds: float) -> None:
        """Up to `seconds`, less when the nodes end."""

    def error(self) -> BaseException | None:
        """What ended the node job, when it failed."""

    def failed_tasks(self) -> int:
        """Failed task attempts so far: a node's executor was lost, or its task raised."""

    def record_task_errors(self, state: RunState) -> None:
        """Hand `state` what the runner knows of failed nodes that could not report themselves."""

    def cancel(self) -> None:
        """Stop every node still running, and wait for them (boundedly)."""


def supervise(job: NodeJob, attempt: Attempt, watch: Watch,
              keep: Callable[[BaseException], bool] | None = None) -> None:
    """Returns when the nodes ended well; otherwise ends the attempt (its nodes hear so) and
    raises `TrainingError`, after cancelling the node job unless `keep(error)` says the next
    attempt runs on it (`cluster.driver.generations`)."""
    tr, state = attempt.tr, attempt.state
    try:
        _await_reservations(job, attempt, watch)
        state.mark(RESERVED)
        running_since = time.time()
        lost = LostWorkers(tr, state, watch.log)
        while job.running():
            watch.poll()
            if watch.stop is not None and watch.stop.is_set():
                raise TrainingError("stopped before the end (the run's backup is kept: running it again resumes)")
            failed = state.errors()
            task_failures = job.failed_tasks()
            if not failed and lost.tolerated(task_failures):
                job.wait(POLL)
                continue
            if failed or task_failures:
                time.sleep(2 * POLL)  # let the other nodes' errors land too: the first one is often a symptom
                raise _failure(job, attempt)
            idle = time.time() - max(running_since, state.last_beat())
            if idle > tr.step_timeout:
                raise TrainingError(f"no training step finished in the last {idle:.0f} s "
                                    f"(train.step_timeout = {tr.step_timeout} s): a TF node hangs", retriable=True)
            job.wait(POLL)
        lost.report()  # a lost worker's retry may report it just before the run ends
        if job.error() is not None or state.errors():  # nodes that reported their error end their tasks well
            raise _failure(job, attempt)
    except BaseException as e:
        state.mark_done(control_channel.RUN_FAILED)  # serving nodes hear the run ended
        if keep is None or not keep(e):
            job.cancel()
        raise


def _failure(job: NodeJob, attempt: Attempt) -> TrainingError:
    job.record_task_errors(attempt.state)
    errors = attempt.errors()
    return TrainingError(failure_message(errors, job.error()), retriable=retriable([t for _, t in errors.values()]))


def _await_reservations(job: NodeJob, attempt: Attempt, watch: Watch) -> None:
    state, timeout = attempt.state, attempt.tr.reservation_timeout
    deadline = time.monotonic() + timeout
    while not state.reserved():
        if watch.stop is not None and watch.stop.is_set():
            raise TrainingError("stopped before the end (the run's backup is kept: running it again resumes)")
        if job.error() is not None or state.errors() or job.failed_tasks():
            time.sleep(2 * POLL)
            raise _failure(job, attempt)
        if not job.running():
            raise _failure(job, attempt)
        if time.monotonic() > deadline and not state.lone:
            nodes = state.required
            raise TrainingError(
                f"only {nodes - state.remaining()} of {nodes} TF nodes started within "
                f"train.reservation_timeout = {timeout:.0f} s (are {nodes} executors free, with one task slot each?)")
        time.sleep(POLL)


class LostWorkers:
    """Parameter-server training goes on when a worker is lost: the chief's coordinator gives
    the lost worker's steps to the others. A failed node task is a lost worker once its retry
    has reported it lost (cluster.node.task); the retry may first wait for a free executor,
    for up to `train.reservation_timeout` seconds. Any other failure, or the loss of every
    worker, fails the attempt."""

    def __init__(self, tr: TrainConfig, state: RunState, log: Callable[[str], None]):
        self.tr, self.state, self.log = tr, state, log
        self.reported: list[str] = []
        self.waiting_since: float | None = None

    def report(self) -> list[str]:
        """Logs each newly lost worker once; returns all lost so far."""
        names = self.state.lost()
        for name in names:
            if name not in self.reported:
                left = self.tr.workers - len(names)
                self.log(f"TF node {name} was lost with its executor; training goes on with {left} worker(s)")
                self.reported.append(name)
        return names

    def tolerated(self, task_failures: int) -> bool:
        if self.tr.strategy != Strategy.PARAMETER_SERVER or task_failures == 0:
            return False
        names = self.report()
        if len(names) >= self.tr.workers:
            raise TrainingError(f"all {self.tr.workers} parameter-server workers were lost with their executors "
                                f"({', '.join(names)})", retriable=True)
        if len(names) >= task_failures:
            self.waiting_since = None
            return True
        self.waiting_since = self.waiting_since or time.monotonic()
        return time.monotonic() - self.waiting_since < self.tr.reservation_timeout
