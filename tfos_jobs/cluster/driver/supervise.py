"""Watching one attempt's TF nodes to their end, wherever they run.

The supervisor reads what the nodes report (`RunState`) and what their runner knows of them
(`NodeJob`: Spark tasks for a TF cluster, threads in a test), and ends the attempt:
  * when the nodes do not all start within `train.reservation_timeout`;
  * at once when any node fails, with the node's own traceback (a retried TF node joins the
    next attempt, not this one);
  * when no step finishes for `train.step_timeout` (a hang: retriable);
  * on `stop` (a sweep's pruner or time budget).
A parameter-server worker lost with its executor is tolerated while others remain.

Under elastic training (`train.elastic`, multi_worker_mirrored) it also ends an attempt with a
`Resize`: when its nodes have not all started after `wait_seconds` and fewer executors than nodes
are registered (a lost node's executor did not come back), so that the run goes on with the
executors there are; and, while the run has fewer workers than `train.workers`, when more
executors are registered, right after the chief's next resume checkpoint, so that the run grows.
"""
from __future__ import annotations

import time
from typing import Callable, Protocol

from tfos_jobs import control_channel
from tfos_jobs.cluster.driver.failure_policy import failure_message, retriable
from tfos_jobs.cluster.driver.launcher import Attempt, Watch
from tfos_jobs.cluster.driver.run_state import RESERVED, RunState
from tfos_jobs.config import TrainConfig
from tfos_jobs.contracts.metrics import GROW, SHRINK
from tfos_jobs.errors import Resize, TrainingError
from tfos_jobs.topology import Strategy

POLL = 0.5
GROW_POLL = 2.0  # seconds between counts of the executors while an elastic run is below train.workers


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

    def executors(self) -> int:
        """Executors registered now (elastic training sizes the next attempt by them)."""


def supervise(job: NodeJob, attempt: Attempt, watch: Watch,
              keep: Callable[[BaseException], bool] | None = None) -> None:
    """Returns when the nodes ended well; otherwise ends the attempt (its nodes hear so) and
    raises `TrainingError`, after cancelling the node job unless `keep(error)` says the next
    attempt runs on it (`cluster.driver.generations`)."""
    train, state = attempt.train, attempt.state
    try:
        _await_reservations(job, attempt, watch)
        state.mark(RESERVED)
        running_since = time.time()
        lost = LostWorkers(train, state, watch.log)
        grow = Growth(job, attempt)
        while job.running():
            watch.poll()
            watch.settle()
            grow.check()
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
            if idle > train.step_timeout:
                raise TrainingError(f"no training step finished in the last {idle:.0f} s "
                                    f"(train.step_timeout = {train.step_timeout} s): a TF node hangs", retriable=True)
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
    state, timeout = attempt.state, attempt.train.reservation_timeout
    deadline = time.monotonic() + timeout
    while not state.reserved():
        if watch.stop is not None and watch.stop.is_set():
            raise TrainingError("stopped before the end (the run's backup is kept: running it again resumes)")
        if job.error() is not None or state.errors() or job.failed_tasks():
            time.sleep(2 * POLL)
            raise _failure(job, attempt)
        if not job.running():
            raise _failure(job, attempt)
        if attempt.train.elastic.on and not state.lone:
            shrink(job, attempt, started=deadline - timeout)
        if time.monotonic() > deadline and not state.lone:
            nodes = state.required
            raise TrainingError(
                f"only {nodes - state.remaining()} of {nodes} TF nodes started within "
                f"train.reservation_timeout = {timeout:.0f} s (are {nodes} executors free, with one task slot each?)")
        time.sleep(POLL)


def shrink(job: NodeJob, attempt: Attempt, started: float) -> None:
    """Raises `Resize` once the attempt's nodes have waited `elastic.wait_seconds` (since
    `started`, monotonic) for the rest while fewer executors than nodes are registered, and at
    least `elastic.min_workers` are; otherwise the attempt waits on, up to `reservation_timeout`."""
    train, state = attempt.train, attempt.state
    if time.monotonic() - started < train.elastic.wait_seconds:
        return
    have, nodes = job.executors(), state.required
    if train.elastic.min_workers <= have < nodes:
        raise Resize(f"only {nodes - state.remaining()} of {nodes} TF nodes started within train.elastic.wait_seconds = "
                     f"{train.elastic.wait_seconds} s, and {have} executor{'s are' if have > 1 else ' is'} registered: "
                     "the run goes on with fewer workers", workers=have, cause=SHRINK)


class Growth:
    """An elastic run below `train.workers` grows when executors join: the attempt ends right
    after the chief publishes its next resume checkpoint (so little is trained again), and
    the next one starts with as many workers as there are executors, up to `train.workers`."""

    def __init__(self, job: NodeJob, attempt: Attempt):
        self.job, self.attempt = job, attempt
        self.on = attempt.train.elastic.on and attempt.train.workers < attempt.wanted
        self.counted = time.monotonic()
        self.seen: float | None = None  # when more executors were first counted (time.time())
        self.have = 0

    def check(self) -> None:
        if not self.on:
            return
        workers, state = self.attempt.train.workers, self.attempt.state
        if self.seen is None:
            if time.monotonic() - self.counted < GROW_POLL:
                return
            self.counted, before = time.monotonic(), time.time()
            self.have = self.job.executors()
            if self.have > workers:
                self.seen = before  # a checkpoint published from the count on is one to grow after
            return
        if state.backup_published() > self.seen:
            grown = min(self.have, self.attempt.wanted)
            raise Resize(f"{self.have - workers} more executor{'s' if self.have - workers > 1 else ''} registered "
                         f"during attempt {self.attempt.number}, which ran {workers} of train.workers = "
                         f"{self.attempt.wanted}: the run grows to {grown} after its last checkpoint",
                         workers=grown, cause=GROW)


class LostWorkers:
    """Parameter-server training goes on when a worker is lost: the chief's coordinator gives the lost worker's steps to
    the others. A failed node task is a lost worker once its retry has reported it lost (cluster.node.task); the retry
    may first wait for a free executor, for up to `train.reservation_timeout` seconds, and takes the lost worker's place
    when it can (on the host it ran on). Any other failure, or the loss of every worker, fails the attempt."""

    def __init__(self, train: TrainConfig, state: RunState, log: Callable[[str], None]):
        self.train, self.state, self.log = train, state, log
        self.reported: list[str] = []
        self.back: list[str] = []  # replaced workers reported
        self.waiting_since: float | None = None

    def report(self) -> list[str]:
        """Logs each newly lost worker once, and each one whose place a new task took; returns all lost so far."""
        names, replaced = self.state.lost(), self.state.replaced()
        for name in names:
            if name not in self.reported:
                left = self.train.workers - len(names) + len(replaced)
                self.log(f"TF node {name} was lost with its executor; training goes on with {left} worker(s)")
                self.reported.append(name)
        for name in replaced:
            if name not in self.back:
                self.log(f"TF node {name} is back: a new task took its place in the TF cluster; the chief's "
                         f"coordinator gives it steps again once it has rebuilt its dataset there")
                self.back.append(name)
        return names

    def tolerated(self, task_failures: int) -> bool:
        if self.train.strategy != Strategy.PARAMETER_SERVER or task_failures == 0:
            return False
        names = self.report()
        if len(set(names) - set(self.state.replaced())) >= self.train.workers:
            raise TrainingError(f"all {self.train.workers} parameter-server workers were lost with their executors "
                                f"({', '.join(names)})", retriable=True)
        if len(names) >= task_failures:
            self.waiting_since = None
            return True
        self.waiting_since = self.waiting_since or time.monotonic()
        return time.monotonic() - self.waiting_since < self.train.reservation_timeout
