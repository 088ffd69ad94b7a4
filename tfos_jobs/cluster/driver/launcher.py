"""The seam between a job and where its TF nodes run.

A job (training, a sweep's trial of either kind) asks for attempts; a `Launcher` runs one attempt
to its end, in this process (`cluster.driver.local`) or as TF nodes on the executors
(`cluster.driver.node_job`), and raises `TrainingError` when it fails. `run_attempts` starts a
new attempt while a failure is one a relaunch can fix; each resumes from the last checkpoint
(`cluster.node.checkpoints`), and what that cost is kept as a `Recovery`.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Protocol

from tfos_jobs.cluster.driver.run_state import RunState
from tfos_jobs.config import TrainConfig
from tfos_jobs.contracts.metrics import Recovery
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import TrainingError


@dataclass(frozen=True)
class Attempt:
    """One launch of the nodes: what they train, and where the driver keeps what they report."""

    number: int  # 1 for the first launch
    tr: TrainConfig
    args: NodeArgs
    meta: DatasetMeta
    state: RunState
    error_file: Callable[[str, str], str]  # (run id, node) -> where that node's traceback is kept

    def errors(self) -> dict[str, tuple[str, str]]:
        """Node -> (its error file, the traceback it reported)."""
        return {node: (self.error_file(self.state.id, node), text) for node, text in self.state.errors().items()}


@dataclass
class Watch:
    """What the driver does while nodes run: print progress, end early on `stop`, count the
    control messages refused (by peer address) and keep the relaunches' recoveries over every
    attempt, and the steps trained before the first (a rerun of an unfinished run)."""

    log: Callable[[str], None]
    poll: Callable[[], None] = lambda: None
    stop: threading.Event | None = None
    rejected: Counter[str] = field(default_factory=Counter)
    recoveries: list[Recovery] = field(default_factory=list)
    resumed_at: int | None = None


class Launcher(Protocol):
    def check(self, tr: TrainConfig, log: Callable[[str], None]) -> None:
        """Before any attempt: refuse settings this launcher cannot run, naming them."""

    def run(self, attempt: Attempt, watch: Watch) -> None:
        """Train one attempt; return when the chief has finished. Raises `TrainingError`
        (retriable or not) on failure, after every node of the attempt has stopped."""

    def close(self) -> None:
        """After the last attempt: end what the attempts left running for the next one."""


def run_attempts(launcher: Launcher, *, max_attempts: int, attempt: Callable[[int], Attempt],
                 watch: Watch) -> Attempt:
    """Up to `max_attempts` launches, a fresh `attempt(number)` each (a new run id and state); returns
    the attempt that finished. A failure a relaunch cannot fix, or the last one, is raised."""
    try:
        return _attempts(launcher, max_attempts, attempt, watch)
    finally:
        launcher.close()


def _attempts(launcher: Launcher, max_attempts: int, attempt: Callable[[int], Attempt], watch: Watch) -> Attempt:
    stepped: Attempt | None = None  # the last failed attempt that trained, until a relaunch trains
    for number in range(1, max_attempts + 1):
        current = attempt(number)
        try:
            launcher.run(current, watch)
            return current
        except TrainingError as e:
            if not e.retriable or number == max_attempts:
                raise
            done = current.state.steps()
            after = f" after {done:,} steps" if done else ""
            watch.log(f"attempt {number} of {max_attempts} failed{after}: {e}\nrelaunching the TF cluster; "
                      "training resumes from the last checkpoint")
        finally:
            first = current.state.first_step()
            if watch.resumed_at is None and first is not None:
                watch.resumed_at = first[1]
            if stepped is not None and first is not None:
                watch.recoveries.append(recovery(stepped, current))
                watch.log(describe(watch.recoveries[-1]))
                stepped = None
            if current.state.last_beat():
                stepped = current
    raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")


def recovery(failed: Attempt, relaunch: Attempt) -> Recovery:
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
                    nodes_kept=kept, nodes_restarted=restarted)


def describe(r: Recovery) -> str:
    return (f"attempt {r['attempt']} resumed at step {r['resumed_at_steps']:,} of the {r['failed_at_steps']:,} done "
            f"before the failure ({r['trained_again']:,} trained again); no step was trained for "
            f"{r['seconds_without_steps']:.1f} s" + (
                f"; {', '.join(r['nodes_kept'])} kept {'their tasks' if len(r['nodes_kept']) > 1 else 'its task'} "
                f"and inputs, {', '.join(r['nodes_restarted']) or 'no node'} started on a new task"
                if r["nodes_kept"] else ""))
