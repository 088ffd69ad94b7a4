"""A sweep trial's contracts: what the sweep (driver) hands the task of a single-process trial
(executor), plain values only, inside the task's closure (the control channel's secret travels
beside it, never in it); what the task returns; the trial's status and its row of the results,
as `trial-<n>/result.json` and the results table keep it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, TypedDict

from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.names import Name


@dataclass(frozen=True)
class TrialPayload:
    trial: int
    settings: Mapping[str, Any]  # the trial's parameter values, by key
    metric: str  # the sweep's metric, as the epoch logs name it
    pruning: bool  # after each epoch, ask the driver (control_channel.SHOULD_PRUNE) whether to stop
    args: NodeArgs  # how to train
    server: tuple[str, int]  # the sweep's control server
    run_id: str
    local_dir: str  # train.local_dir: where the trial's workspace goes on the executor
    inputs: Mapping[str, str]  # the dataset's files: key -> place in the workspace


class TrialStatus(Name):
    COMPLETED = "completed"
    PRUNED = "pruned"  # stopped early by the sweep's pruner (sweep.early_stopping)
    FAILED = "failed"
    CANCELLED = "cancelled"  # stopped by the time budget or an interrupt: a resumed sweep runs it again


FINISHED = (TrialStatus.COMPLETED, TrialStatus.PRUNED, TrialStatus.FAILED)


class TrialSummary(TypedDict):
    """How a trial ended, from its progress (`search.trials.summarise`)."""
    status: str  # a TrialStatus's value
    value: float | None  # the sweep's metric, at the epoch whose model the trial keeps
    error: str | None
    epochs_run: int
    metrics: dict[str, float]  # that epoch's


class TrialResult(TrialSummary):
    """A trial's row of the results: its summary, its settings, who ran it when."""
    trial: int
    settings: dict[str, Any]
    started: float
    finished: float
    seconds: float
    host: str | None
    pid: int | None


class TrialOutcome(TypedDict):
    """What a trial task returns to the driver: how it ended, where it ran."""
    status: str
    error: str | None
    host: str
    pid: int
