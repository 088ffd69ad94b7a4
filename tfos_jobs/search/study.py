"""The sweep's Optuna study: where it is kept, and the sweep's trials as its trials.

The study lives on the driver. `sweep.storage` empty keeps it in `study.journal` in the sweep directory (Optuna's
JournalStorage, a local file; on hdfs:// or s3a:// a local copy, fetched at the start and written back after each trial
and at the end); else it is an SQLAlchemy URL. Either way Optuna's own tools (`optuna.load_study`, optuna-dashboard)
open it.

The sweep numbers its trials from 1 (`trial-001`); each Optuna trial carries that number as the user attribute
TRIAL_ATTR, and the study carries the sweep's fingerprint, so a study is never continued by a different sweep."""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
import warnings
from typing import Any, Callable

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState, create_trial

from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.sweep_dir import SweepDir
from tfos_jobs.errors import ConfigError
from tfos_jobs.search import samplers
from tfos_jobs.config.sweep import Pruner, SweepConfig
from tfos_jobs.contracts.trial import ParamValue, TrialResult, TrialStatus
from tfos_jobs.search.trials import metric_by_epoch
from tfos_jobs.storage import Storage

TRIAL_ATTR = "sweep_trial"  # the sweep's number of an Optuna trial (trial-<n>)
FINGERPRINT_ATTR = "sweep_fingerprint"  # on the study: which sweep it belongs to
METRIC_ATTR, ERROR_ATTR = "metric", "error"
STATES = {TrialStatus.COMPLETED: TrialState.COMPLETE, TrialStatus.PRUNED: TrialState.PRUNED,
          TrialStatus.FAILED: TrialState.FAIL}  # a cancelled trial stays RUNNING: it runs again


def mask(url: str) -> str:
    """A storage URL as it may be shown or written: without its password."""
    if not url:
        return url
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("://", 1)[0] + "://***"


def default_name(sweep_dir: str, fingerprint: str) -> str:
    """`sweep.study_name` left empty: the sweep directory's last part and the fingerprint's start."""
    return f"{sweep_dir.rstrip('/').rsplit('/', 1)[-1]}-{fingerprint[:8]}"


class StudyPlace:
    """Where the study is kept: an SQLAlchemy URL, or the sweep directory's journal file (through
    a local copy when the sweep directory is not on a local filesystem)."""

    def __init__(self, storage: Storage, sweep: SweepConfig, sweep_dir: str):
        self.storage, self.url = storage, sweep.storage
        self.remote: str | None = None
        self._tmp: str | None = None
        if self.url:
            self.shown = mask(self.url)
            self.journal = None
            return
        remote = SweepDir(sweep_dir).journal
        self.shown = remote
        self.journal = storage.on_this_host(remote)
        if self.journal is None:  # hdfs://, s3a://, ...: JournalStorage needs a local file
            self._tmp = tempfile.mkdtemp(prefix="tfos-study-")
            self.journal, self.remote = SweepDir(self._tmp).journal, remote
            if storage.exists(remote):
                storage.download(remote, self.journal)

    def optuna_storage(self) -> optuna.storages.BaseStorage:
        if self.journal is None:
            return optuna.storages.RDBStorage(self.url)
        from optuna.storages.journal import JournalFileBackend

        os.makedirs(os.path.dirname(self.journal), exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(self.journal))

    def save(self) -> None:
        """Write the local copy of the journal back to the sweep directory."""
        if self.remote is not None and self.journal is not None and os.path.exists(self.journal):
            self.storage.upload_file(self.journal, self.remote)

    def close(self) -> None:
        self.save()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _scrubbed(error: Exception, url: str) -> str:
    """An error's text without the storage URL's password."""
    text = f"{type(error).__name__}: {error}"
    try:
        from sqlalchemy.engine import make_url

        password = make_url(url).password if url else None
    except Exception:
        return type(error).__name__
    return text.replace(str(password), "***") if password else text


class SweepStudy:
    """The sweep's side of its study: asks for trials, reuses those a stopped run left RUNNING,
    reports epochs, judges them with the pruner and tells outcomes. Thread-safe: trials ask
    through the control server's thread while the sweep's loop reports and tells."""

    def __init__(self, study: optuna.Study, sweep: SweepConfig, log: Callable[[str], None]):
        self.study, self.sweep, self.log = study, sweep, log
        self.distributions = samplers.distributions(sweep)
        self._lock = threading.RLock()
        self._live: dict[int, Trial] = {}
        self._reported: dict[int, set[int]] = {}

    @classmethod
    def open(cls, place: StudyPlace, sweep: SweepConfig, name: str, fingerprint: str, max_epochs: int,
             log: Callable[[str], None] = print) -> "SweepStudy":
        """Create the study, or load it when it exists and belongs to this sweep."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            study = optuna.create_study(study_name=name, storage=place.optuna_storage(), direction=sweep.goal,
                                        sampler=samplers.sampler(sweep, 0),
                                        pruner=samplers.pruner(sweep, max_epochs), load_if_exists=True)
        except Exception as e:
            raise ConfigError(f"sweep.storage {place.shown}: cannot open study {name!r} "
                              f"({_scrubbed(e, place.url)})") from None
        owner = study.user_attrs.get(FINGERPRINT_ATTR)
        used = [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING]
        if owner != fingerprint and (owner is not None or used or study.direction.name.lower() != sweep.goal):
            raise ConfigError(
                f"study {name!r} in {place.shown} belongs to another sweep (its space, metric, algorithm or "
                "training settings differ); set sweep.study_name to another name, or sweep.storage to another "
                "storage")
        if owner is None:  # new, or made beforehand (with enqueued trials, say)
            study.set_user_attr(FINGERPRINT_ATTR, fingerprint)
            study.set_user_attr(METRIC_ATTR, sweep.metric)
            with warnings.catch_warnings():  # set_metric_names is marked experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names([sweep.metric])
        return cls(study, sweep, log)

    # -- the sweep's trials --------------------------------------------------------------------

    def by_number(self) -> dict[int, FrozenTrial]:
        """The latest Optuna trial of each sweep trial number."""
        with self._lock:
            out = {}
            for t in self.study.get_trials(deepcopy=False):
                if isinstance(t.user_attrs.get(TRIAL_ATTR), int):
                    out[t.user_attrs[TRIAL_ATTR]] = t
            return out

    def restore(self, results: dict[int, TrialResult], lines: dict[int, list[EpochLine]]) -> int:
        """Teach the study the finished trials it does not know as finished (a new storage, or
        a run stopped between a trial's result and telling it); returns how many it learned."""
        learned = 0
        with self._lock:
            known = self.by_number()
            for n, result in sorted(results.items()):
                state, value = _outcome(result)
                frozen = known.get(n)
                if frozen is not None and frozen.state.is_finished():
                    continue
                if frozen is not None and frozen.state == TrialState.RUNNING:
                    self._tell(Trial(self.study, frozen._trial_id), state, value)
                else:
                    try:
                        self._add(n, result["settings"], state, value,
                                  metric_by_epoch(lines.get(n, []), self.sweep.metric))
                    except (KeyError, ValueError) as e:  # the study still works without it
                        self.log(f"warning: trial {n:03d} cannot be added to the study: {e}")
                        continue
                learned += 1
        return learned

    def start(self, number: int, settings: dict[str, ParamValue] | None = None) -> dict[str, ParamValue]:
        """The settings of trial `number`, which starts now: a RUNNING Optuna trial of an earlier
        run is reused (and so are its settings); one started before (`settings` known) whose
        Optuna trial is missing gets one; any other is asked from the sampler."""
        with self._lock:
            frozen = self.by_number().get(number)
            if frozen is not None and frozen.state == TrialState.RUNNING:
                trial = Trial(self.study, frozen._trial_id)
                self._reported[number] = set(frozen.intermediate_values)
            elif settings is not None:
                self._add(number, settings, TrialState.RUNNING, None, {})
                trial = Trial(self.study, self.by_number()[number]._trial_id)
                self._reported[number] = set()
            else:
                self.study.sampler = samplers.sampler(self.sweep, number)
                trial = self.study.ask(self.distributions)
                trial.set_user_attr(TRIAL_ATTR, number)
                self._reported[number] = set()
            self._live[number] = trial
            return {key: trial.params[key] for key in self.distributions}

    def report(self, number: int, epoch: int, value: float | None) -> None:
        """A running trial's metric at an epoch (from 1); an epoch already reported is kept as it was."""
        with self._lock:
            trial = self._live.get(number)
            if trial is None or value is None or epoch in self._reported[number]:
                return
            trial.report(float(value), epoch)
            self._reported[number].add(epoch)

    def should_prune(self, number: int, epoch: int, value: float | None) -> bool:
        """Report, then ask the pruner; a value that is not finite (the trial diverged) prunes."""
        if self.sweep.early_stopping == Pruner.NONE:
            return False
        with self._lock:
            self.report(number, epoch, value)
            if value is None or number not in self._live:
                return False
            if not math.isfinite(value):
                return True
            return bool(self._live[number].should_prune())  # a pruner may answer numpy's bool

    def finish(self, result: TrialResult) -> None:
        """Tell the study how a running trial ended; a cancelled one stays RUNNING."""
        status = TrialStatus(result["status"])
        with self._lock:
            trial = self._live.pop(result["trial"], None)
            if trial is None or status == TrialStatus.CANCELLED:
                return
            if status == TrialStatus.FAILED and result["error"]:
                trial.set_user_attr(ERROR_ATTR, str(result["error"])[:1000])
            state, value = _outcome(result)
            self._tell(trial, state, value)

    def _tell(self, trial: Trial, state: TrialState, value: float | None) -> None:
        try:
            if state == TrialState.COMPLETE:
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=state)
        except (ValueError, RuntimeError) as e:  # finished meanwhile by another process
            self.log(f"warning: the study did not take trial {trial.number}'s outcome: {e}")

    def _add(self, number: int, settings: dict[str, Any], state: TrialState, value: float | None,
             intermediate: dict[int, float]) -> None:
        self.study.add_trial(create_trial(
            state=state, value=value, params={k: settings[k] for k in self.distributions},
            distributions=self.distributions, user_attrs={TRIAL_ATTR: number}, intermediate_values=intermediate))


def _outcome(result: TrialResult) -> tuple[TrialState, float | None]:
    """The Optuna state and value of a finished trial's row; a metric that is not finite fails."""
    status, value = TrialStatus(result["status"]), result["value"]
    finite = isinstance(value, (int, float)) and math.isfinite(value)
    if status == TrialStatus.COMPLETED:
        return (TrialState.COMPLETE, float(value)) if finite and value is not None else (TrialState.FAIL, None)
    return STATES[status], None
