"""A sweep trial's result row (contracts.trial.TrialResult), built from its progress.

The trial task (executor) trains and reports over the control channel (its epochs, the model and resume state it
publishes, its outcome); the sweep (driver) keeps its files (contracts.sweep_dir) and builds every result with
`trial_result`."""
from __future__ import annotations

import time
from typing import Any, Sequence

from tfos_jobs.contracts.trial import TrialResult, TrialStatus, TrialSummary
from tfos_jobs.contracts.epoch_line import EpochLine


def metric_by_epoch(lines: Sequence[EpochLine], metric: str) -> dict[int, float]:
    """`metric` at each epoch of progress lines; a resumed run's repeated epoch counts once (the last)."""
    return {line.epoch: line.metrics[metric] for line in lines if metric in line.metrics}


def metric_history(lines: Sequence[EpochLine], metric: str) -> list[float]:
    """Per-epoch values of `metric` from progress lines, in epoch order."""
    by_epoch = metric_by_epoch(lines, metric)
    return [by_epoch[e] for e in sorted(by_epoch)]


def trial_result(trial: int, settings: dict[str, Any], lines: Sequence[EpochLine], metric: str, status: TrialStatus,
                 error: str | None, started: float, host: str | None = None, pid: int | None = None,
                 kept_at_lowest: str | None = None) -> TrialResult:
    """A trial's row of the results: who ran it when, and `summarise` of its progress `lines`."""
    finished = time.time()
    summary = summarise(lines, metric, status, error, kept_at_lowest)
    return TrialResult(trial=trial, settings=settings, started=started, host=host, pid=pid, finished=finished,
                       seconds=round(finished - started, 2), **summary)


def summarise(lines: Sequence[EpochLine], metric: str, status: TrialStatus, error: str | None,
              kept_at_lowest: str | None = None) -> TrialSummary:
    """Status, the metric's value and the metrics of the epoch whose model the trial keeps (the last, or with
    `kept_at_lowest` the one where that metric was lowest: early stopping's restored epoch), from the trial's progress.
    A trial that finished without the metric failed, and says which metrics it had."""
    history = metric_history(lines, metric)
    kept, value = (lines[-1] if lines else None), (history[-1] if history else None)
    lowest = metric_by_epoch(lines, kept_at_lowest) if kept_at_lowest else {}
    if lowest and history:
        epoch = min(lowest, key=lambda e: (lowest[e], e))
        kept = [line for line in lines if line.epoch == epoch][-1]
        value = metric_by_epoch(lines, metric).get(epoch, value)
    metrics = dict(kept.metrics) if kept else {}
    if status in (TrialStatus.COMPLETED, TrialStatus.PRUNED) and not history:
        available = sorted(metrics) or ["(no epoch finished)"]
        status = TrialStatus.FAILED
        error = error or f"metric {metric!r} is not among the trial's metrics: {', '.join(available)}"
    return TrialSummary(status=status.value, value=value, error=error,
                        epochs_run=len(history) if history else len({line.epoch for line in lines}), metrics=metrics)
