"""A sweep trial's contracts: its status and its row of the results, as `trial-<n>/result.json`
and the results table keep it."""
from __future__ import annotations

from typing import TypedDict

from tfos_jobs.config.sweep import ParamValue
from tfos_jobs.names import Name


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
    settings: dict[str, ParamValue]  # setting (train.learning_rate, ...) -> value
    started: float
    finished: float
    seconds: float
    host: str | None
    pid: int | None
