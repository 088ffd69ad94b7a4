"""The seam between a job and where its TF nodes run.

A job (training, a sweep's trial of either kind) asks for attempts; a `Launcher` runs one attempt to its end, in this
process (`cluster.driver.local`) or as TF nodes on the executors (`cluster.driver.node_job`), and raises `TrainingError`
when it fails. `run_attempts` starts a new attempt while a failure is one a relaunch can fix; each resumes from the last
checkpoint (`cluster.node.checkpoints`), and what that cost is kept as a `Recovery`. Under elastic training
(`train.elastic`) an attempt may also end in a `Resize`: the next one runs with fewer or more workers, and that does not
count as a failure.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Protocol

from tfos_jobs.cluster.driver.run_state import RunState
from tfos_jobs.config import TrainConfig
from tfos_jobs.contracts.metrics import FAILURE, Recovery
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import Resize, TrainingError


@dataclass(frozen=True)
class Attempt:
    """One launch of the nodes: what they train, and where the driver keeps what they report."""

    number: int  # 1 for the first launch
    train: TrainConfig  # as this attempt runs it (elastic training: `workers` may differ from the run's)
    args: NodeArgs
    meta: DatasetMeta
    state: RunState
    error_file: Callable[[str, str], str]  # (run id, node) -> where that node's traceback is kept
    workers_wanted: int = 0  # the run's train.workers, which elastic training grows back to (0: train.workers)

    @property
    def wanted(self) -> int:
        return self.workers_wanted or self.train.workers

    def errors(self) -> dict[str, tuple[str, str]]:
        """Node -> (its error file, the traceback it reported)."""
        return {node: (self.error_file(self.state.id, node), text) for node, text in self.state.errors().items()}


@dataclass
class Watch:
    """What the driver does while nodes run: print progress, end early on `stop`, count the control messages refused (by
    peer address) and keep the relaunches' recoveries over every attempt (each printed as its first step lands), and the
    steps trained before the first (a rerun of an unfinished run)."""

    log: Callable[[str], None]
    poll: Callable[[], None] = lambda: None
    stop: threading.Event | None = None
    rejected: Counter[str] = field(default_factory=Counter)
    recoveries: list[Recovery] = field(default_factory=list)
    resumed_at: int | None = None
    settle: Callable[[], None] = lambda: None  # records a relaunch's recovery once its first step is in


class Launcher(Protocol):
    def check(self, train: TrainConfig, log: Callable[[str], None]) -> None:
        """Before any attempt: refuse settings this launcher cannot run, naming them."""

    def run(self, attempt: Attempt, watch: Watch) -> None:
        """Train one attempt; return when the chief has finished. Raises `TrainingError`
        (retriable or not) on failure, after every node of the attempt has stopped."""

    def close(self) -> None:
        """After the last attempt: end what the attempts left running for the next one."""


def run_attempts(launcher: Launcher, *, max_attempts: int, attempt: Callable[[int, int | None], Attempt],
                 watch: Watch) -> Attempt:
    """Launches until one finishes, a fresh `attempt(number, workers)` each (a new run id and
    state; `workers`: None as configured, else the size the last `Resize` asked for); returns the
    attempt that finished. A failure a relaunch cannot fix, or the `max_attempts`th, is raised."""
    try:
        return _attempts(launcher, max_attempts, attempt, watch)
    finally:
        launcher.close()


def _attempts(launcher: Launcher, max_attempts: int, attempt: Callable[[int, int | None], Attempt],
              watch: Watch) -> Attempt:
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
    stepped: Attempt | None = None  # the last ended attempt that trained, until a relaunch trains
    failures = resizes = number = 0
    workers: int | None = None
    cause = FAILURE  # why the last attempt ended
    while True:
        number += 1
        current = attempt(number, workers)

        def settle(current: Attempt = current, cause: str = cause) -> None:
            """Once the attempt's first step is in: where it resumed, and what its relaunch cost."""
            nonlocal stepped
            first = current.state.first_step()
            if first is None:
                return
            if watch.resumed_at is None:
                watch.resumed_at = first[1]
            if stepped is not None:
                watch.recoveries.append(recovery(stepped, current, cause))
                watch.log(describe(watch.recoveries[-1]))
                stepped = None

        watch.settle = settle  # the supervisor calls it as the attempt runs
        try:
            launcher.run(current, watch)
            return current
        except Resize as e:
            resizes, workers, cause = resizes + 1, e.workers, e.cause
            watch.log(f"{e}\nrelaunching the TF cluster with {e.workers} worker{'s' if e.workers > 1 else ''}; "
                      "training resumes from the last checkpoint")
        except TrainingError as e:
            failures, cause = failures + 1, FAILURE
            if not e.retriable or failures == max_attempts:
                raise
            done = current.state.steps()
            after = f" after {done:,} steps" if done else ""
            watch.log(f"attempt {number} of {max_attempts + resizes} failed{after}: {e}\nrelaunching the TF "
                      "cluster; training resumes from the last checkpoint")
        finally:
            settle()
            watch.settle = lambda: None
            if current.state.last_beat():
                stepped = current


def recovery(failed: Attempt, relaunch: Attempt, cause: str = FAILURE) -> Recovery:
    """What the relaunch cost: the steps trained again, and the time no step was trained. The
    failed attempt got at least as far as its last heartbeat said, and as the checkpoint the
    relaunch resumed from (published after that heartbeat, maybe)."""
    first = relaunch.state.first_step()
    assert first is not None  # the relaunch trained
    at, resumed = first
    reached = max(failed.state.steps(), resumed)
    kept, restarted = relaunch.state.tasks()
    return Recovery(attempt=relaunch.number, failed_at_steps=reached, resumed_at_steps=resumed,
                    trained_again=reached - resumed,
                    seconds_without_steps=round(at - failed.state.last_beat(), 1), resumed_time=at,
                    nodes_kept=kept, nodes_restarted=restarted, cause=cause, workers=relaunch.train.workers)


def describe(r: Recovery) -> str:
    sized = f" with {r['workers']} worker{'s' if r['workers'] > 1 else ''}" if r["cause"] != FAILURE else ""
    return (f"attempt {r['attempt']}{sized} resumed at step {r['resumed_at_steps']:,} of the {r['failed_at_steps']:,} done "
            f"before the failure ({r['trained_again']:,} trained again); no step was trained for "
            f"{r['seconds_without_steps']:.1f} s" + (
                f"; {', '.join(r['nodes_kept'])} kept {'their tasks' if len(r['nodes_kept']) > 1 else 'its task'} "
                f"and inputs, {', '.join(r['nodes_restarted']) or 'no node'} started on a new task"
                if r["nodes_kept"] else ""))
