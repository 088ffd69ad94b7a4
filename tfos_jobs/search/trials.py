"""A sweep trial's contract: its status, its result row and its directory's files.

The trial task (executor) writes them, the sweep (driver) reads them and writes the ones of
trials that never reported; both build results with `trial_result` and nothing else.

    <sweep_dir>/trial-<n>/
      params.json      the trial's settings, written before it starts
      progress.jsonl   one line per finished epoch (the median rule reads the others')
      result.json      a TrialResult
      error.txt        the traceback of a trial that failed
      saved_model/     the trained model (completed trials)
"""
from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypedDict

from tfos_jobs.contracts.run_dir import ModelDir, read_json, write_json, write_text
from tfos_jobs.errors import ConfigError
from tfos_jobs.progress_log import read_progress
from tfos_jobs.search.early_stopping import metric_history


class TrialStatus(str, Enum):
    COMPLETED = "completed"
    PRUNED = "pruned"  # stopped early by the median rule
    FAILED = "failed"
    CANCELLED = "cancelled"  # stopped by the time budget or an interrupt: a resumed sweep runs it again

    def __str__(self) -> str:
        return self.value


FINISHED = (TrialStatus.COMPLETED, TrialStatus.PRUNED, TrialStatus.FAILED)
# Progress-line fields that are bookkeeping, not metrics.
_NOT_METRICS = ("epoch", "epochs", "time", "seconds", "eval_seconds", "examples_per_sec")


class TrialResult(TypedDict):
    """A trial's row of the results (as JSON: `status` is the status's value)."""
    trial: int
    settings: dict[str, Any]
    status: str
    value: float | None  # the sweep's metric, last epoch
    epochs_run: int
    metrics: dict[str, float]  # the last epoch's
    error: str | None
    started: float
    finished: float
    seconds: float
    host: str | None
    pid: int | None


@dataclass(frozen=True)
class TrialDir(ModelDir):
    """A trial trains into its directory as into a model directory, plus its own files."""

    @staticmethod
    def of(sweep_dir: str, number: int) -> "TrialDir":
        return TrialDir(f"{sweep_dir}/trial-{number:03d}")

    @staticmethod
    def all_in(sweep_dir: str) -> dict[int, "TrialDir"]:
        """The trials that were started (their params are written), by number."""
        out = {}
        for path in glob.glob(f"{glob.escape(sweep_dir)}/trial-*"):
            number = os.path.basename(path).removeprefix("trial-")
            if number.isdigit() and os.path.exists(f"{path}/params.json"):
                out[int(number)] = TrialDir(path)
        return dict(sorted(out.items()))

    @property
    def params(self) -> str:
        return f"{self.path}/params.json"

    @property
    def result(self) -> str:
        return f"{self.path}/result.json"

    @property
    def error(self) -> str:
        return f"{self.path}/error.txt"

    def write_params(self, settings: dict[str, Any]) -> None:
        write_json(self.params, settings, indent=2)

    def read_params(self) -> dict[str, Any]:
        return _read(self.params)

    def write_result(self, result: TrialResult) -> None:
        write_json(self.result, result, indent=2)

    def read_result(self) -> TrialResult | None:
        return _read(self.result) if os.path.exists(self.result) else None

    def write_error(self, text: str) -> None:
        write_text(self.error, text)

    def clear_outcome(self) -> None:
        """Forget how an earlier run of this trial ended (it resumes)."""
        for path in (self.result, self.error):
            if os.path.exists(path):
                os.remove(path)

    def others_progress(self) -> list[str]:
        """The progress files of the sweep's other trials."""
        others = TrialDir.all_in(os.path.dirname(self.path)).values()
        return [d.progress for d in others if d.path != self.path]


def _read(path: str) -> Any:
    try:
        return read_json(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read ({e}); delete it (or its trial directory) to run that part again") from None


def trial_result(trial: int, settings: dict[str, Any], directory: TrialDir, metric: str, status: TrialStatus,
                 error: str | None, started: float, host: str | None = None, pid: int | None = None) -> TrialResult:
    """A trial's row of the results: who ran it when, and `summarise` of its progress."""
    finished = time.time()
    summary = summarise(directory, metric, status, error)
    return TrialResult(trial=trial, settings=settings, started=started, host=host, pid=pid, finished=finished,
                       seconds=round(finished - started, 2), **summary)


def summarise(directory: TrialDir, metric: str, status: TrialStatus, error: str | None) -> dict[str, Any]:
    """Status, the metric's final value and the last epoch's metrics, from the trial's progress.
    A trial that finished without the metric failed, and says which metrics it had."""
    lines = read_progress(directory.progress)
    history = metric_history(lines, metric)
    metrics = {k: v for k, v in (lines[-1] if lines else {}).items() if k not in _NOT_METRICS}
    out: dict[str, Any] = {"status": status.value, "value": history[-1] if history else None, "error": error,
                           "epochs_run": len(history) if history else len({line["epoch"] for line in lines}),
                           "metrics": metrics}
    if status in (TrialStatus.COMPLETED, TrialStatus.PRUNED) and not history:
        available = sorted(metrics) or ["(no epoch finished)"]
        out.update(status=TrialStatus.FAILED.value,
                   error=error or f"metric {metric!r} is not among the trial's metrics: {', '.join(available)}")
    return out
