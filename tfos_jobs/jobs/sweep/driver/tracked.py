"""A sweep in MLflow (`[tracking]`): one parent run for the sweep, a nested run per trial with
its settings, epochs and outcome (pruned and failed trials marked), and the best model logged
on the parent (and registered when asked). Tracking never fails or holds up the sweep."""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable

from tfos_jobs.config import Config
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.sweep_dir import SweepDir
from tfos_jobs.jobs.sweep.driver.observer import SweepObserver
from tfos_jobs.config.sweep import SweepConfig
from tfos_jobs.contracts.trial import TrialResult, TrialStatus
from tfos_jobs.storage import Storage
from tfos_jobs.tracking.model_log import local_copy, log_model
from tfos_jobs.tracking.params import config_params, flatten
from tfos_jobs.tracking.run_logger import STATUS_TAG, TrackedRun, Tracking

COMMAND_TAG, DIR_TAG, TRIAL_TAG = "tfos.command", "tfos.sweep_dir", "tfos.trial"
# How a trial's run ends in MLflow's terms; the tfos status is kept as a tag beside it.
RUN_STATUS = {TrialStatus.COMPLETED: "FINISHED", TrialStatus.PRUNED: "KILLED", TrialStatus.CANCELLED: "KILLED",
              TrialStatus.FAILED: "FAILED"}


class MlflowSweepObserver(SweepObserver):
    def __init__(self, config: Config, storage: Storage, log: Callable[[str], None] = print):
        self.config, self.storage, self.log = config, storage, log
        self.tracking = Tracking(config.tracking, log)
        self.parent: TrackedRun | None = None
        self.trials: dict[int, TrackedRun] = {}
        self.sweep: SweepConfig | None = None
        self.sweep_dir = ""
        self.workdir = tempfile.mkdtemp(prefix="tfos-sweep-tracking-")

    def sweep_started(self, sweep: SweepConfig, sweep_dir: str, total: int) -> None:
        self.sweep, self.sweep_dir = sweep, sweep_dir
        name = os.path.basename(sweep_dir.rstrip("/")) or "sweep"
        parent = self.parent = TrackedRun(self.tracking)

        def open_parent() -> None:  # a resumed sweep goes on in the run it started
            client = self.tracking.client
            found = client.search_runs([self.tracking.experiment_id], max_results=1,
                                       filter_string=f"tags.`{COMMAND_TAG}` = 'sweep' and tags.`{DIR_TAG}` = '{sweep_dir}'")
            if found:
                parent.id, parent.artifact_uri = found[0].info.run_id, found[0].info.artifact_uri
                client.update_run(parent.id, status="RUNNING")
                return
            run = client.create_run(self.tracking.experiment_id, run_name=f"sweep {name}",
                                    tags={COMMAND_TAG: "sweep", DIR_TAG: sweep_dir})
            parent.id, parent.artifact_uri = run.info.run_id, run.info.artifact_uri
            parent.params({**config_params(self.config), **flatten({"sweep": _sweep_params(sweep)}),
                           "sweep.total_trials": str(total)})

        self.tracking.submit(open_parent)
        self.log(f"tracking: logging the sweep to {self.tracking.where}, experiment {self.config.tracking.experiment!r}")

    def trial_started(self, number: int, settings: dict[str, Any]) -> None:
        run = self.tracking.start_run(f"trial {number:03d}", tags={TRIAL_TAG: str(number), COMMAND_TAG: "sweep trial"},
                                      parent=self.parent)
        run.params({key: str(value) for key, value in settings.items()})
        self.trials[number] = run

    def trial_epoch(self, number: int, line: EpochLine) -> None:
        if number in self.trials:
            self.trials[number].epoch(line)

    def trial_finished(self, number: int, result: TrialResult) -> None:
        run = self.trials.pop(number, None)
        if run is None:
            return
        status = TrialStatus(result["status"])
        figures: dict[str, float | None] = {"seconds": result.get("seconds"), "epochs_run": result.get("epochs_run")}
        if self.sweep is not None:
            figures[f"final_{self.sweep.metric}"] = result.get("value")
        run.metrics({k: v for k, v in figures.items() if isinstance(v, (int, float))})
        run.tags({STATUS_TAG: status.value, **({"tfos.error": str(result["error"])[:5000]} if result.get("error") else {})})
        run.end(RUN_STATUS[status])

    def sweep_finished(self, best: TrialResult | None, rows: list[TrialResult], best_model: str | None) -> None:
        parent, sweep = self.parent, self.sweep
        if parent is None or sweep is None:
            return
        counts = {f"trials_{s.value}": sum(r["status"] == s for r in rows) for s in TrialStatus}
        value = best["value"] if best else None
        parent.metrics({**counts, **({f"best_{sweep.metric}": value} if value is not None else {})})
        if best:
            parent.tags({"tfos.best_trial": str(best["trial"])})
        files = SweepDir(self.sweep_dir)
        for path, name in ((f"{files.results}.csv", "results.csv"), (files.plot, "sweep.png")):
            local = local_copy(self.storage, path, self.workdir, name)
            if local:
                parent.artifact(local)
        if best_model:
            saved_model = local_copy(self.storage, best_model, self.workdir, "saved_model")
            if saved_model:
                tc = self.config.tracking
                log_model(parent, saved_model, self.workdir, tc.register, tc.alias, self.log)
        parent.end("FINISHED")

    def close(self, failed: bool) -> None:
        """At the end of `tfos sweep`, however it ended: unsent logging gets its time, files go."""
        if failed and self.parent is not None:
            for run in self.trials.values():
                run.end("KILLED")
            self.parent.end("FAILED")
        if self.tracking.wait() and self.parent is not None and not failed:
            self.log(f"tracking: sweep run {self.parent.id} in experiment {self.config.tracking.experiment!r}")
        shutil.rmtree(self.workdir, ignore_errors=True)


def _sweep_params(sweep: SweepConfig) -> dict[str, Any]:
    """The sweep's own settings (its space as JSON): what makes it the sweep it is."""
    import dataclasses

    out = {k: v for k, v in dataclasses.asdict(sweep).items() if k not in ("params", "fixed")}
    out["space"] = {p.key: {k: v for k, v in dataclasses.asdict(p).items() if k != "key" and v is not None}
                    for p in sweep.params}
    out["fixed"] = dict(sweep.fixed)
    return out
