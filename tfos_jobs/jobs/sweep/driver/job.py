"""The sweep job (driver side): ask the study for trials, run them in parallel as Spark tasks,
watch them, judge their epochs with the pruner, and report.

`<sweep_dir>/` holds everything, so a sweep can be resumed and inspected, on any filesystem
the session reaches (the driver writes it all):
  sweep.json                  the sweep's definition (a different sweep refuses the dir)
  study.journal               the Optuna study, unless sweep.storage names a database (search.study)
  trial-<n>/                  one trial (contracts.sweep_dir.TrialDir)
  results.parquet/.csv, sweep.png, best/saved_model
Every trial is a training run (`jobs.train`) into its directory, on a driver thread of its own,
its nodes started through the launcher seam (`cluster.driver.launcher`) as any run's are: a
single-process trial is one node that trains alone, in one Spark task that Spark places on a
free executor slot; a cluster trial (`workers_per_trial` > 1) is a TF cluster. The time budget
and the pruner stop a run through its `stop` event; a single-process trial asks the pruner itself
after each epoch (`RunState.judge`) and ends without an export when told to.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from pyspark.sql import SparkSession

from tfos_jobs import user_code
from tfos_jobs.cluster.driver import node_inputs
from tfos_jobs.cluster.driver.launcher import Launcher
from tfos_jobs.cluster.driver.node_job import ClusterLauncher
from tfos_jobs.contracts.node_args import STOPPING_METRIC
from tfos_jobs.contracts.sweep_dir import SweepDir, TrialDir
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import ConfigError, OutputExistsError, Pruned, TrainingError
from tfos_jobs.jobs.sweep.driver import report as sweep_report
from tfos_jobs.jobs.sweep.driver.observer import Guarded, SweepObserver
from tfos_jobs.progress_log import ProgressLog, read_progress
from tfos_jobs.config import Config
from tfos_jobs.config.sweep import Algorithm, Pruner, SweepConfig
from tfos_jobs.search import samplers
from tfos_jobs.search.space import largest, model_kinds, trial_config
from tfos_jobs.search.study import StudyPlace, SweepStudy, default_name, mask
from tfos_jobs.contracts.trial import FINISHED, ParamValue, TrialResult, TrialStatus
from tfos_jobs.search.trials import trial_result
from tfos_jobs.storage import Storage, named
from tfos_jobs.topology import Strategy
from tfos_jobs.worker_python import check_worker_python

POLL = 0.5

# (lone node: whether the trial is one node that trains alone) -> where the trial's nodes run
LauncherFor = Callable[[bool], Launcher]


@dataclass(frozen=True)
class Known:
    """A trial the sweep directory already holds (a resumed sweep)."""

    settings: dict[str, ParamValue]
    result: TrialResult | None
    directory: TrialDir


@dataclass
class Running:
    number: int
    settings: dict[str, ParamValue]
    thread: threading.Thread
    started: float
    directory: TrialDir
    progress: ProgressLog
    outcome: dict[str, Any] = field(default_factory=dict)
    epochs_shown: int = 0
    cancelled: bool = False  # by the time budget or an interrupt: runs again when the sweep is resumed
    pruned: bool = False  # a cluster trial the pruner stopped (a single-process trial stops itself)
    stop: threading.Event = field(default_factory=threading.Event)  # ends the trial's run
    restores_best: bool = False  # early stopping keeps the epoch of the lowest val_loss: its metric is the value


@dataclass
class Context:
    """What launching and finishing trials needs, in one place."""

    spark: SparkSession | None
    storage: Storage
    meta: DatasetMeta
    base: Config
    sweep: SweepConfig
    dir: str
    study: SweepStudy
    launcher: LauncherFor
    log: Callable[[str], None]
    notify: Guarded


def run(spark: SparkSession | None, base: Config, sweep: SweepConfig, *, log: Callable[[str], None] = print,
        observer: SweepObserver | None = None, launcher: LauncherFor | None = None) -> dict[str, Any]:
    """Run (or resume) the sweep; returns {"best": the best trial's result (None when none completed), "results": every
    trial's, "dir": the sweep directory}. Each trial trains with `base` and its settings. `observer` hears of the
    sweep's progress. `launcher`: where each trial's nodes run (default: the session's executors)."""
    storage = Storage(spark)
    meta = node_inputs.read_dataset(storage, "train.dataset", base.train.dataset)  # refuses a directory that is not a dataset
    if spark is not None:
        user_code.ship(spark, model_kinds(sweep, base.train.model.kind), log)  # for the trials' executors
        check_worker_python(spark)  # once: each trial's train job then finds it checked
    launcher = launcher or default_launcher(spark, pruning=sweep.early_stopping != Pruner.NONE)
    if sweep.workers_per_trial > 1 and base.train.strategy == Strategy.LOCAL:
        raise ConfigError("sweep.workers_per_trial > 1 makes every trial a TF cluster: set train.strategy to "
                          "multi_worker_mirrored or parameter_server")
    with named("sweep.dir", sweep.dir):
        sweep_dir = storage.qualify(sweep.dir)
    storage.check_writable("sweep.dir", sweep_dir)
    fingerprint, name = _open_dir(storage, sweep_dir, sweep, dataclasses.asdict(base.train))
    known = {n: Known(d.read_params(storage), d.read_result(storage), d)
             for n, d in TrialDir.all_in(storage, sweep_dir).items()}
    results = {n: t.result for n, t in known.items() if t.result and t.result["status"] in FINISHED}
    total = samplers.total(sweep)
    todo = [n for n in range(1, total + 1) if n not in results]
    notify = Guarded(observer, log)
    with contextlib.ExitStack() as stack:  # closed in reverse: the server, the channel, then the study's place
        place = StudyPlace(storage, sweep, sweep_dir)
        stack.callback(place.close)
        max_epochs = int(largest(sweep, "train.epochs", base.train.epochs))
        study = SweepStudy.open(place, sweep, name, fingerprint, max_epochs, log)
        learned = study.restore(results, {n: read_progress(storage, known[n].directory.progress) for n in results})
        if results:
            log(f"resuming the sweep in {sweep_dir}: {len(results)} of {total} trials already finished, "
                f"{len(todo)} to run")
        log(f"sweep: {sweep.algorithm}, {total} trials, up to {sweep.max_parallel_trials} at a time, "
            f"{sweep.goal} {sweep.metric}, pruner {sweep.early_stopping}, into {sweep_dir}")
        log(f"study: {name!r} in {place.shown}" + (f" ({learned} finished trial(s) added to it)" if learned else ""))
        _notes(sweep, total, log)
        notify(SweepObserver.sweep_started, dataclasses.replace(sweep, storage=mask(sweep.storage)), sweep_dir, total)
        started = time.time()
        ctx = Context(spark, storage, meta, base, sweep, sweep_dir, study, launcher, log, notify)
        _run_trials(ctx, place, known, results, todo, total)
    best = sweep_report.finish(storage, sweep_dir, sweep, results, total, time.time() - started, log)
    rows = [results[n] for n in sorted(results)]
    notify(SweepObserver.sweep_finished, best, rows, SweepDir(sweep_dir).best_model if best else None)
    return {"best": best, "results": rows, "dir": sweep_dir}


def default_launcher(spark: SparkSession | None, *, pruning: bool) -> LauncherFor:
    """Trials on the session's executors; a lone node (a single-process trial) asks the pruner
    after each epoch when the sweep has one."""
    return lambda lone: ClusterLauncher(spark, pruning=lone and pruning)


def _notes(sweep: SweepConfig, total: int, log: Callable[[str], None]) -> None:
    size = samplers.grid_size(sweep)
    if sweep.sampler == Algorithm.GRID and size > total:
        log(f"note: the grid has {size} points; sweep.max_trials = {sweep.max_trials} runs {total} of them, "
            "in an order drawn from sweep.seed")
    drawn = samplers.independent_params(sweep)
    if drawn:
        log(f"note: CMA-ES models two or more numeric parameters; {', '.join(drawn)} are drawn at random")


def _run_trials(ctx: Context, place: StudyPlace, known: dict[int, Known], results: dict[int, TrialResult],
                todo: list[int], total: int) -> None:
    """Launch trials while there are free slots and time, watch them, record each as it ends."""
    sweep, log = ctx.sweep, ctx.log
    deadline = time.time() + sweep.time_budget_seconds if sweep.time_budget_seconds else None
    running: dict[int, Running] = {}
    budget_hit = False
    try:
        while todo or running:
            while todo and len(running) < sweep.max_parallel_trials and not budget_hit:
                n = todo.pop(0)
                running[n] = _launch(ctx, n, known[n].settings if n in known else None)
            time.sleep(POLL)
            for n, trial in list(running.items()):
                _watch_epochs(ctx, trial)
                if trial.thread.is_alive():
                    continue
                del running[n]
                result = _result_of(ctx, trial)
                results[n] = result
                ctx.study.finish(result)
                place.save()
                log(sweep_report.finished_line(sweep, result, list(results.values()), total, len(running)))
                sweep_report.write_table(ctx.storage, ctx.dir, sweep, list(results.values()))
                ctx.notify(SweepObserver.trial_finished, n, result)
            if deadline and time.time() > deadline and not budget_hit:
                budget_hit = True
                log(f"time budget of {sweep.time_budget_seconds} s used up: no new trials; "
                    f"stopping {len(running)} running trial(s) (re-run the sweep to continue)")
                todo.clear()
            if budget_hit:
                _cancel(running.values())
    except BaseException:
        _cancel(running.values())
        for trial in running.values():
            trial.thread.join(90)
        raise


def _cancel(trials: Iterable[Running]) -> None:
    """Stop each trial's run (its nodes are cancelled by its supervisor)."""
    for trial in trials:
        trial.cancelled = True
        trial.stop.set()


def _open_dir(storage: Storage, sweep_dir: str, sweep: SweepConfig, base_train: dict[str, Any]) -> tuple[str, str]:
    """A new dir gets `sweep.json`; an existing one must hold the same sweep (resume): the same space, metric and
    algorithm over the same training settings. Returns the sweep's fingerprint and its study's name."""
    path = SweepDir(sweep_dir).definition
    fingerprint = hashlib.sha256(f"{sweep.fingerprint()}{json.dumps(base_train, sort_keys=True)}".encode()).hexdigest()[:16]
    name = sweep.study_name or default_name(sweep_dir, fingerprint)
    if storage.exists(path):
        try:
            old = json.loads(storage.read_text(path))
        except Exception as e:
            raise ConfigError(f"{path} cannot be read ({e}); delete the sweep directory to start over") from None
        if old.get("fingerprint") != fingerprint:
            raise OutputExistsError(
                f"{sweep_dir} holds a different sweep (its space, metric, algorithm or training settings differ); "
                "use another sweep.dir, or delete that directory to start over")
        return fingerprint, name
    if storage.children(sweep_dir):
        raise OutputExistsError(f"{sweep_dir} exists and is not a sweep directory; choose another sweep.dir")
    storage.write_text(path, json.dumps(definition(sweep, fingerprint, name, base_train), indent=2, default=str))
    return fingerprint, name


def definition(sweep: SweepConfig, fingerprint: str, study_name: str, base_train: dict[str, Any]) -> dict[str, Any]:
    """What `sweep.json` keeps: the sweep as given, with the storage URL's password masked."""
    shown = dataclasses.asdict(sweep)
    shown["storage"] = mask(sweep.storage)
    return {"fingerprint": fingerprint, "study_name": study_name, "sweep": shown, "train": base_train}


def _launch(ctx: Context, n: int, known_settings: dict[str, ParamValue] | None) -> Running:
    storage, sweep = ctx.storage, ctx.sweep
    settings = ctx.study.start(n, known_settings)
    directory = TrialDir.of(ctx.dir, n)
    resumed = _reset_trial_dir(storage, directory)
    directory.write_params(storage, settings)
    progress = ProgressLog(storage, directory.progress, resume=resumed)
    trial = Running(n, settings, threading.Thread(), time.time(), directory, progress)
    trial.epochs_shown = len(progress.lines())  # a resumed trial's earlier epochs (the study has them)
    ctx.log(f"trial {n:03d} started: {_settings_text(sweep, settings)}")
    ctx.notify(SweepObserver.trial_started, n, dict(settings))
    try:
        config = trial_config(ctx.base, sweep, settings)
    except ConfigError as e:  # a combination of values the config refuses: this trial fails, the sweep goes on
        trial.outcome["result"] = _record(ctx, trial, TrialStatus.FAILED, str(e))
        return trial
    trial.restores_best = config.train.early_stopping_patience > 0
    lone = sweep.workers_per_trial == 1
    # A held-out test split is for the model the sweep ends with, not for choosing it.
    config = dataclasses.replace(config, train=dataclasses.replace(
        config.train, model_dir=directory.path, tensorboard=False, score_test=False,
        **({"strategy": Strategy.LOCAL} if lone else {"workers": sweep.workers_per_trial})))
    launcher = ctx.launcher(lone)

    def judge(epoch: int, metrics: dict[str, float]) -> bool:
        return ctx.study.should_prune(n, epoch, metrics.get(sweep.metric))

    def target() -> None:
        from tfos_jobs.jobs import train

        try:
            metrics = train.run(ctx.spark, config, overwrite=True, log=lambda line: None, stop=trial.stop,
                                progress=trial.progress, launcher=launcher, judge=judge if lone else None)
            node = metrics["nodes"][0] if metrics["nodes"] else None
            trial.outcome["task"] = {"status": TrialStatus.COMPLETED.value, "error": None,
                                     "host": node["host"] if node else None, "pid": node["pid"] if node else None}
        except Pruned:
            trial.outcome["task"] = {"status": TrialStatus.PRUNED.value, "error": None}
        except Exception as e:
            pruned = trial.pruned and isinstance(e, TrainingError)
            status = TrialStatus.PRUNED if pruned else TrialStatus.FAILED
            trial.outcome["task"] = {"status": status.value, "error": None if pruned else f"{type(e).__name__}: {e}"}

    trial.thread = threading.Thread(target=target, name=f"tfos-trial-{n}", daemon=True)
    trial.thread.start()
    return trial


def _watch_epochs(ctx: Context, trial: Running) -> None:
    """Each new epoch of a trial, once: shown, told to the observer and reported to the study;
    a cluster trial the pruner stops is stopped here (a single-process trial asks itself)."""
    lines = trial.progress.lines()
    for line in lines[trial.epochs_shown:]:
        ctx.log(sweep_report.epoch_line(ctx.sweep, trial.number, line))
        ctx.notify(SweepObserver.trial_epoch, trial.number, line)
        value = line.metrics.get(ctx.sweep.metric)
        if ctx.sweep.workers_per_trial == 1:
            ctx.study.report(trial.number, line.epoch, value)
        elif ctx.study.should_prune(trial.number, line.epoch, value) and not trial.stop.is_set():
            ctx.log(f"  trial {trial.number:03d} pruned after epoch {line.epoch}: stopping its cluster")
            trial.pruned = True
            trial.stop.set()
    trial.epochs_shown = max(trial.epochs_shown, len(lines))


def _reset_trial_dir(storage: Storage, directory: TrialDir) -> bool:
    """A trial that stopped part-way resumes from its backup (True); without one it starts clean."""
    if storage.tree(directory.backup):
        directory.clear_outcome(storage)
        return True
    storage.delete(directory.path)
    storage.makedirs(directory.path)
    return False


def _record(ctx: Context, trial: Running, status: TrialStatus, error: str | None, host: str | None = None,
            pid: int | None = None) -> TrialResult:
    """The trial's result row, written to its directory unless it was cancelled (a resumed
    sweep runs it again, from its resume state), with the traceback of a trial that failed."""
    result = trial_result(trial.number, trial.settings, trial.progress.lines(), ctx.sweep.metric, status, error,
                          trial.started, host, pid, kept_at_lowest=STOPPING_METRIC if trial.restores_best else None)
    if status != TrialStatus.CANCELLED:
        trial.directory.write_result(ctx.storage, result)
        ctx.storage.delete(trial.directory.backup)  # a finished trial is never resumed
    tracebacks = trial.directory.node_errors(ctx.storage)
    if status == TrialStatus.FAILED and tracebacks:
        trial.directory.write_error(ctx.storage, tracebacks[-1])
    return result


def _result_of(ctx: Context, trial: Running) -> TrialResult:
    if "result" in trial.outcome:
        return trial.outcome["result"]
    if trial.cancelled and not trial.pruned:  # no result file: the next run of the sweep runs it again
        return _record(ctx, trial, TrialStatus.CANCELLED, "stopped by the sweep's time budget")
    done = trial.outcome.get("task") or {"status": TrialStatus.FAILED.value, "error": "the trial's run ended unreported"}
    return _record(ctx, trial, TrialStatus(done["status"]), done["error"], done.get("host"), done.get("pid"))


def _settings_text(sweep: SweepConfig, settings: dict[str, ParamValue]) -> str:
    return ", ".join(f"{p.column}={settings[p.key]}" for p in sweep.params)
