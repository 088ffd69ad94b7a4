"""The files of a sweep directory, on whatever filesystem it lives (the driver writes them all).

    <sweep_dir>/
      sweep.json          the sweep's definition and fingerprint (a different sweep refuses the dir)
      study.journal       the Optuna study (JournalStorage), unless sweep.storage names a database
      trial-<n>/          one trial (TrialDir): it trains into it as into a model directory, and
        params.json       its settings, written before it starts
        progress.jsonl    one line per finished epoch
        result.json       its row of the results (contracts.trial.TrialResult)
        error.txt         the traceback of a trial that failed
        saved_model/  backup/
      results.parquet  results.csv    one row per trial
      sweep.png           the metric against each parameter, and over the trials
      best/saved_model  best/trial.json   the best trial's model and row
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tfos_jobs.contracts.model_dir import ERROR_SUFFIX, ModelDir
from tfos_jobs.contracts.trial import ParamValue, TrialResult
from tfos_jobs.errors import ConfigError
from tfos_jobs.storage import Storage, StorageError


@dataclass(frozen=True)
class SweepDir:
    path: str

    @property
    def definition(self) -> str:
        return f"{self.path}/sweep.json"

    @property
    def journal(self) -> str:
        """The Optuna study's journal file (optuna.storages.JournalStorage)."""
        return f"{self.path}/study.journal"

    @property
    def results(self) -> str:
        """The results table without its suffix: `.parquet` and `.csv` are written."""
        return f"{self.path}/results"

    @property
    def plot(self) -> str:
        return f"{self.path}/sweep.png"

    @property
    def best(self) -> str:
        return f"{self.path}/best"

    @property
    def best_model(self) -> str:
        return ModelDir(self.best).saved_model

    @property
    def best_row(self) -> str:
        return f"{self.best}/trial.json"

    def trial(self, number: int) -> "TrialDir":
        return TrialDir.of(self.path, number)


PREFIX = "trial-"


@dataclass(frozen=True)
class TrialDir(ModelDir):
    """A trial trains into its directory as into a model directory, plus its own files. The
    driver reads and writes them through storage."""

    @staticmethod
    def name(number: int) -> str:
        """`trial-007`: the trial's directory, and its workspace on an executor."""
        return f"{PREFIX}{number:03d}"

    @staticmethod
    def of(sweep_dir: str, number: int) -> "TrialDir":
        return TrialDir(f"{sweep_dir}/{TrialDir.name(number)}")

    @staticmethod
    def all_in(storage: Storage, sweep_dir: str) -> dict[int, "TrialDir"]:
        """The trials that were started (their params are written), by number."""
        names = [name.removeprefix(PREFIX) for name in storage.children(sweep_dir) if name.startswith(PREFIX)]
        trials = {n: TrialDir.of(sweep_dir, n) for n in sorted(int(name) for name in names if name.isdigit())}
        return {n: trial for n, trial in trials.items() if storage.exists(trial.params)}

    @property
    def params(self) -> str:
        return f"{self.path}/params.json"

    @property
    def result(self) -> str:
        return f"{self.path}/result.json"

    @property
    def error(self) -> str:
        return f"{self.path}/error.txt"

    def write_params(self, storage: Storage, settings: dict[str, ParamValue]) -> None:
        storage.write_text(self.params, json.dumps(settings, indent=2))

    def read_params(self, storage: Storage) -> dict[str, ParamValue]:
        return _read(storage, self.params)

    def write_result(self, storage: Storage, result: TrialResult) -> None:
        storage.write_text(self.result, json.dumps(result, indent=2))

    def read_result(self, storage: Storage) -> TrialResult | None:
        return _read(storage, self.result) if storage.exists(self.result) else None

    def write_error(self, storage: Storage, text: str) -> None:
        storage.write_text(self.error, text)

    def node_errors(self, storage: Storage) -> list[str]:
        """The tracebacks its nodes reported in its last run (ModelDir.error_file), oldest run first."""
        return [storage.read_text(f"{self.runs}/{rel}") for rel, _ in storage.tree(self.runs)
                if rel.endswith(ERROR_SUFFIX)]

    def clear_outcome(self, storage: Storage) -> None:
        """Forget how an earlier run of this trial ended (it resumes)."""
        for path in (self.result, self.error):
            storage.delete(path)


def _read(storage: Storage, path: str) -> Any:
    try:
        return json.loads(storage.read_text(path))
    except (StorageError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read ({e}); delete it (or its trial directory) to run that part again") from None
