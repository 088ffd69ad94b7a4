"""A sweep trial's contract: its status, its result row and its directory's files.

The trial task (executor) trains and reports over the control channel (its epochs, the model
and resume state it publishes, its outcome); the sweep (driver) keeps its files, on whatever
filesystem the sweep directory lives, and builds every result with `trial_result`.

    <sweep_dir>/trial-<n>/
      params.json      the trial's settings, written before it starts
      progress.jsonl   one line per finished epoch (the median rule compares them)
      result.json      a TrialResult
      error.txt        the traceback of a trial that failed
      saved_model/     the trained model (completed trials)
      backup/          the resume state of a trial that was stopped part-way
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypedDict

from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.errors import ConfigError
from tfos_jobs.search.early_stopping import metric_history
from tfos_jobs.storage import Storage, StorageError


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


class TrialOutcome(TypedDict):
    """What a trial task returns to the driver: how it ended, where it ran."""
    status: str
    error: str | None
    host: str
    pid: int


PREFIX = "trial-"


@dataclass(frozen=True)
class TrialDir(ModelDir):
    """A trial trains into its directory as into a model directory, plus its own files. The
    driver reads and writes them through storage."""

    @staticmethod
    def of(sweep_dir: str, number: int) -> "TrialDir":
        return TrialDir(f"{sweep_dir}/{PREFIX}{number:03d}")

    @staticmethod
    def all_in(storage: Storage, sweep_dir: str) -> dict[int, "TrialDir"]:
        """The trials that were started (their params are written), by number."""
        out = {}
        for name in storage.children(sweep_dir):
            number = name.removeprefix(PREFIX)
            if name.startswith(PREFIX) and number.isdigit() and storage.exists(TrialDir.of(sweep_dir, int(number)).params):
                out[int(number)] = TrialDir.of(sweep_dir, int(number))
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

    def write_params(self, storage: Storage, settings: dict[str, Any]) -> None:
        storage.write_text(self.params, json.dumps(settings, indent=2))

    def read_params(self, storage: Storage) -> dict[str, Any]:
        return _read(storage, self.params)

    def write_result(self, storage: Storage, result: TrialResult) -> None:
        storage.write_text(self.result, json.dumps(result, indent=2))

    def read_result(self, storage: Storage) -> TrialResult | None:
        return _read(storage, self.result) if storage.exists(self.result) else None

    def write_error(self, storage: Storage, text: str) -> None:
        storage.write_text(self.error, text)

    def clear_outcome(self, storage: Storage) -> None:
        """Forget how an earlier run of this trial ended (it resumes)."""
        for path in (self.result, self.error):
            storage.delete(path)


def _read(storage: Storage, path: str) -> Any:
    try:
        return json.loads(storage.read_text(path))
    except (StorageError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read ({e}); delete it (or its trial directory) to run that part again") from None


def trial_result(trial: int, settings: dict[str, Any], lines: list[dict[str, Any]], metric: str, status: TrialStatus,
                 error: str | None, started: float, host: str | None = None, pid: int | None = None) -> TrialResult:
    """A trial's row of the results: who ran it when, and `summarise` of its progress `lines`."""
    finished = time.time()
    summary = summarise(lines, metric, status, error)
    return TrialResult(trial=trial, settings=settings, started=started, host=host, pid=pid, finished=finished,
                       seconds=round(finished - started, 2), **summary)


def summarise(lines: list[dict[str, Any]], metric: str, status: TrialStatus, error: str | None) -> dict[str, Any]:
    """Status, the metric's final value and the last epoch's metrics, from the trial's progress.
    A trial that finished without the metric failed, and says which metrics it had."""
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
