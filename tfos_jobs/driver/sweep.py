"""The sweep job (driver side): propose trials, run them in parallel as Spark tasks, watch
them, and report.

`<sweep_dir>/` holds everything, so a sweep can be resumed and inspected:
  sweep.json                  the sweep's definition (a different sweep refuses the dir)
  trial-<n>/                  one trial (search.trials.TrialDir)
  results.parquet/.csv, sweep.png, best/saved_model
Each single-process trial is one Spark job of one task, in its own job group, started from
a driver thread: Spark places it on a free executor slot, and the time budget cancels it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pyspark import InheritableThread
from pyspark.sql import SparkSession

from tfos_jobs import config as config_mod
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.run_dir import read_json, write_json
from tfos_jobs.data import meta as meta_mod
from tfos_jobs.driver import sweep_report
from tfos_jobs.errors import ConfigError, OutputExistsError
from tfos_jobs.progress_log import read_progress
from tfos_jobs.search import samplers
from tfos_jobs.search.space import ParamValue, SweepConfig, trial_config
from tfos_jobs.search.trials import FINISHED, TrialDir, TrialResult, TrialStatus, trial_result

POLL = 0.5


@dataclass
class Running:
    number: int
    settings: dict[str, ParamValue]
    group: str
    thread: threading.Thread
    started: float
    directory: TrialDir
    outcome: dict[str, Any] = field(default_factory=dict)
    epochs_shown: int = 0
    cancelled: bool = False  # by the time budget or an interrupt: runs again when the sweep is resumed
    stop: threading.Event = field(default_factory=threading.Event)  # ends a TFoS-cluster trial


def run(spark: SparkSession, base_config: str, base_overrides: Sequence[str], sweep: SweepConfig, *,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the sweep; returns the best trial's result (None when none completed)."""
    base = config_mod.load(base_config, base_overrides)
    meta_mod.read(base.train.dataset)  # refuses a directory that is not a finished dataset
    if sweep.workers_per_trial > 1 and base.train.strategy == "local":
        raise ConfigError("sweep.workers_per_trial > 1 makes every trial a TF cluster: set train.strategy to "
                          "multi_worker_mirrored or parameter_server")
    sweep_dir = os.path.abspath(sweep.dir)
    _open_dir(sweep_dir, sweep, config_mod.to_dict(base)["train"])
    sampler = samplers.make(sweep)
    known = _known_trials(sweep_dir)
    results = {n: t["result"] for n, t in known.items() if t["result"] and t["result"]["status"] in FINISHED}
    for n in sorted(results):
        sampler.tell(n - 1, results[n]["settings"], results[n]["status"], results[n]["value"])
    total = sampler.total()
    todo = [n for n in range(1, total + 1) if n not in results]
    if results:
        log(f"resuming the sweep in {sweep_dir}: {len(results)} of {total} trials already finished, "
            f"{len(todo)} to run")
    log(f"sweep: {sweep.algorithm}, {total} trials, up to {sweep.max_parallel_trials} at a time, "
        f"{sweep.goal} {sweep.metric}, into {sweep_dir}")
    if isinstance(sampler, samplers.GridSampler) and len(sampler.points) > total:
        log(f"note: the grid has {len(sampler.points)} points; sweep.max_trials = {sweep.max_trials} runs the first "
            f"{total} (the first parameters vary slowest)")

    sc = spark.sparkContext
    started = time.time()
    deadline = started + sweep.time_budget_seconds if sweep.time_budget_seconds else None
    running: dict[int, Running] = {}
    budget_hit = False
    try:
        while todo or running:
            while todo and len(running) < sweep.max_parallel_trials and not budget_hit:
                n = todo.pop(0)
                settings = known[n]["settings"] if n in known else sampler.propose(n - 1)
                running[n] = _launch(sc, base_config, base_overrides, sweep, sweep_dir, n, settings, log)
            time.sleep(POLL)
            for n, trial in list(running.items()):
                _show_epochs(sweep, trial, log)
                if trial.thread.is_alive():
                    continue
                del running[n]
                result = _result_of(sweep, trial)
                results[n] = result
                sampler.tell(n - 1, result["settings"], result["status"], result["value"])
                log(_finished_line(sweep, result, results, total, len(running)))
                sweep_report.write_table(sweep_dir, sweep, list(results.values()))
            if deadline and time.time() > deadline and not budget_hit:
                budget_hit = True
                log(f"time budget of {sweep.time_budget_seconds} s used up: no new trials; "
                    f"stopping {len(running)} running trial(s) (re-run the sweep to continue)")
                todo = []
            if budget_hit:  # every poll: a trial thread may submit its job after an earlier cancel
                _cancel(sc, running.values())
    except BaseException:
        _cancel(sc, running.values())
        raise
    return _report(sweep_dir, sweep, results, total, time.time() - started, log)


def _cancel(sc, trials) -> None:
    for trial in trials:
        trial.cancelled = True
        trial.stop.set()
        sc.cancelJobGroup(trial.group)


def _open_dir(sweep_dir: str, sweep: SweepConfig, base_train: dict[str, Any]) -> None:
    """A new dir gets `sweep.json`; an existing one must hold the same sweep (resume): the
    same space, metric and algorithm over the same training settings."""
    path = f"{sweep_dir}/sweep.json"
    fingerprint = hashlib.sha256(f"{sweep.fingerprint()}{json.dumps(base_train, sort_keys=True)}".encode()).hexdigest()[:16]
    if os.path.exists(path):
        try:
            old = read_json(path)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{path} cannot be read ({e}); delete the sweep directory to start over") from None
        if old.get("fingerprint") != fingerprint:
            raise OutputExistsError(
                f"{sweep_dir} holds a different sweep (its space, metric, algorithm or training settings differ); "
                "use another sweep.dir, or delete that directory to start over")
        return
    if os.path.isdir(sweep_dir) and os.listdir(sweep_dir):
        raise OutputExistsError(f"{sweep_dir} exists and is not a sweep directory; choose another sweep.dir")
    os.makedirs(sweep_dir, exist_ok=True)
    write_json(path, {"fingerprint": fingerprint, "sweep": dataclasses.asdict(sweep), "train": base_train},
               indent=2, default=str)


def _known_trials(sweep_dir: str) -> dict[int, dict[str, Any]]:
    """Trials of earlier runs: their settings and, when they finished, their result."""
    return {n: {"settings": d.read_params(), "result": d.read_result()} for n, d in TrialDir.all_in(sweep_dir).items()}


def _launch(sc, base_config: str, base_overrides: Sequence[str], sweep: SweepConfig, sweep_dir: str, n: int,
            settings: dict[str, ParamValue], log: Callable[[str], None]) -> Running:
    from tfos_jobs.executor.trial import run_trial

    directory = TrialDir.of(sweep_dir, n)
    _reset_trial_dir(directory)
    directory.write_params(settings)
    group = f"tfos-sweep-{os.path.basename(sweep_dir)}-trial-{n:03d}"
    trial = Running(n, settings, group, threading.Thread(), time.time(), directory)
    trial.epochs_shown = len(read_progress(directory.progress))  # a resumed trial's earlier epochs
    log(f"trial {n:03d} started: {_settings_text(sweep, settings)}")
    try:
        cfg = trial_config(base_config, base_overrides, sweep, settings)
    except ConfigError as e:  # a combination of values the config refuses: this trial fails, the sweep goes on
        result = trial_result(n, settings, directory, sweep.metric, TrialStatus.FAILED, str(e), trial.started)
        directory.write_result(result)
        trial.outcome["result"] = result
        return trial

    if sweep.workers_per_trial > 1:
        target = _cluster_trial(cfg, sweep, trial)
    else:
        tr = dataclasses.replace(cfg.train, strategy="local", tensorboard=False)
        args = NodeArgs.from_train_config(tr, dataset=os.path.abspath(tr.dataset), model_dir=directory.path,
                                          run_dir=f"{directory.runs}/trial")
        payload = {"trial": n, "settings": settings, "trial_dir": directory.path,
                   "metric": sweep.metric, "goal": sweep.goal, "early_stopping": sweep.early_stopping == "median",
                   "warmup_epochs": sweep.warmup_epochs, "min_trials": sweep.min_trials, "args": args.to_dict()}

        def target():
            sc.setJobGroup(group, f"tfos sweep trial {n}", interruptOnCancel=True)
            try:
                trial.outcome["result"] = sc.parallelize([payload], 1).map(run_trial).collect()[0]
            except Exception as e:  # cancelled (time budget) or the task failed for good
                trial.outcome["error"] = e

    trial.thread = InheritableThread(target=target, name=f"tfos-trial-{n}")
    trial.thread.daemon = True
    trial.thread.start()
    return trial


def _cluster_trial(cfg, sweep: SweepConfig, trial: Running) -> Callable[[], None]:
    """A trial that is a TFoS cluster of `workers_per_trial` workers, trained as `tfos train` does."""
    from tfos_jobs.driver import train

    directory = trial.directory
    tr = dataclasses.replace(cfg.train, workers=sweep.workers_per_trial, model_dir=directory.path, tensorboard=False)
    cfg = dataclasses.replace(cfg, train=tr)

    def target():
        spark = SparkSession.builder.getOrCreate()
        error = None
        try:
            train.run(spark, cfg, overwrite=True, log=lambda line: None, stop=trial.stop)
            status = TrialStatus.COMPLETED
        except Exception as e:
            status, error = TrialStatus.FAILED, f"{type(e).__name__}: {e}"
        if trial.cancelled:  # no result file: the next run of the sweep resumes it from its backup
            trial.outcome["result"] = _cancelled(sweep, trial)
            return
        result = trial_result(trial.number, trial.settings, directory, sweep.metric, status, error, trial.started)
        directory.write_result(result)
        trial.outcome["result"] = result

    return target


def _cancelled(sweep: SweepConfig, trial: Running) -> TrialResult:
    return trial_result(trial.number, trial.settings, trial.directory, sweep.metric, TrialStatus.CANCELLED,
                        "stopped by the sweep's time budget", trial.started)


def _reset_trial_dir(directory: TrialDir) -> None:
    """A trial that stopped part-way resumes from its backup; without one it starts clean."""
    if directory.has_backup():
        directory.clear_outcome()
        return
    shutil.rmtree(directory.path, ignore_errors=True)
    os.makedirs(directory.path)


def _result_of(sweep: SweepConfig, trial: Running) -> TrialResult:
    if "result" in trial.outcome and not trial.cancelled:
        return trial.outcome["result"]
    # The task never returned: cancelled (time budget, interrupt), or failed on every attempt.
    if trial.cancelled:  # no result file: the next run of the sweep runs it again
        return _cancelled(sweep, trial)
    text = str(trial.outcome.get("error", "")).strip().splitlines()
    message = next((ln.strip() for ln in reversed(text) if "Error" in ln or "Exception" in ln),
                   text[0] if text else "the trial's Spark task failed on every attempt (see the executor logs)")
    result = trial_result(trial.number, trial.settings, trial.directory, sweep.metric, TrialStatus.FAILED, message,
                          trial.started)
    trial.directory.write_result(result)
    return result


def _show_epochs(sweep: SweepConfig, trial: Running, log: Callable[[str], None]) -> None:
    lines = read_progress(trial.directory.progress)
    for line in lines[trial.epochs_shown:]:
        value = line.get(sweep.metric)
        shown = f"{sweep.metric} {value:.4f}" if isinstance(value, (int, float)) else ""
        log(f"  trial {trial.number:03d} epoch {line['epoch']}/{line['epochs']}  {shown}  "
            f"loss {line.get('loss', float('nan')):.4f}  {line.get('examples_per_sec', 0):,.0f} ex/s")
    trial.epochs_shown = max(trial.epochs_shown, len(lines))


def _settings_text(sweep: SweepConfig, settings: dict[str, ParamValue]) -> str:
    return ", ".join(f"{p.column}={settings[p.key]}" for p in sweep.params)


def _finished_line(sweep: SweepConfig, result: dict[str, Any], results: dict[int, dict[str, Any]], total: int,
                   running: int) -> str:
    n, status = result["trial"], result["status"]
    value = f"{sweep.metric} {result['value']:.4f}" if result["value"] is not None else ""
    what = result["error"] if status == TrialStatus.FAILED else value
    best = sweep_report.best(sweep, list(results.values()))
    best_text = f"best trial {best['trial']:03d} ({sweep.metric} {best['value']:.4f})" if best else "no best yet"
    done = sum(r["status"] in FINISHED for r in results.values())
    return (f"trial {n:03d} {status} in {result['seconds']:.0f} s: {what}  "
            f"[{done}/{total} done, {running} running; {best_text}]")


def _report(sweep_dir: str, sweep: SweepConfig, results: dict[int, dict[str, Any]], total: int, seconds: float,
            log: Callable[[str], None]) -> dict[str, Any]:
    rows = [results[n] for n in sorted(results)]
    if not rows:
        raise ConfigError("the sweep ran no trial (is the time budget too small?)")
    table = sweep_report.write_table(sweep_dir, sweep, rows)
    sweep_report.plot(sweep_dir, sweep, rows)
    best = sweep_report.export_best(sweep_dir, sweep, rows)
    log(sweep_report.leaderboard(sweep, rows))
    counts = {s: sum(r["status"] == s for r in rows) for s in TrialStatus}
    log(f"sweep finished in {seconds:.0f} s: " + ", ".join(f"{v} {k.value}" for k, v in counts.items() if v)
        + (f"; {total - len(rows)} not run" if len(rows) < total else ""))
    log(f"results: {table}.parquet, {table}.csv; plot: {sweep_dir}/sweep.png")
    if best:
        log(f"best: trial {best['trial']:03d}, {sweep.metric} {best['value']:.4f}; model: {sweep_dir}/best/saved_model")
    else:
        log("no trial completed: no best model")
    return {"best": best, "results": rows}
