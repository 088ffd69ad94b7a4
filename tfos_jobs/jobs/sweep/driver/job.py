"""The sweep job (driver side): ask the study for trials, run them in parallel as Spark tasks,
watch them, judge their epochs with the pruner, and report.

`<sweep_dir>/` holds everything, so a sweep can be resumed and inspected, on any filesystem
the session reaches (the driver writes it all):
  sweep.json                  the sweep's definition (a different sweep refuses the dir)
  study.journal               the Optuna study, unless sweep.storage names a database (search.study)
  trial-<n>/                  one trial (contracts.sweep_dir.TrialDir)
  results.parquet/.csv, sweep.png, best/saved_model
Each single-process trial is one Spark job of one task, in its own job group, started from
a driver thread: Spark places it on a free executor slot, hands it the dataset's files, and
the time budget cancels it. Trials report to the sweep's control server (`channel.Trials`),
which keeps each one's progress, publishes what it hands over and answers whether to prune.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pyspark import InheritableThread
from pyspark.sql import SparkSession

from tfos_jobs import control_channel as cc
from tfos_jobs import user_code
from tfos_jobs.cluster.driver import node_inputs
from tfos_jobs.cluster.driver.control_server import ControlServer, control_address
from tfos_jobs.cluster.driver.run_state import new_run_id
from tfos_jobs.config import parse_ports
from tfos_jobs.contracts.dataset import SPLITS
from tfos_jobs.contracts.node_args import STOPPING_METRIC, NodeArgs
from tfos_jobs.contracts.sweep_dir import SweepDir, TrialDir
from tfos_jobs.contracts.trial import TrialPayload
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import ConfigError, OutputExistsError
from tfos_jobs.jobs.sweep.driver import report as sweep_report
from tfos_jobs.jobs.sweep.driver.channel import Trials
from tfos_jobs.jobs.sweep.driver.observer import Guarded, SweepObserver
from tfos_jobs.progress_log import EPOCH, ProgressLog, read_progress
from tfos_jobs.search import samplers
from tfos_jobs.search.names import Algorithm, Pruner
from tfos_jobs.search.space import model_kinds
from tfos_jobs.search.space import BaseConfig, ParamValue, SweepConfig, largest, trial_config
from tfos_jobs.search.space import base as space_base
from tfos_jobs.search.study import StudyPlace, SweepStudy, default_name, mask
from tfos_jobs.contracts.trial import FINISHED, TrialResult, TrialStatus
from tfos_jobs.search.trials import trial_result
from tfos_jobs.storage import Storage, named
from tfos_jobs.topology import Strategy

POLL = 0.5


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
    group: str
    thread: threading.Thread
    started: float
    directory: TrialDir
    progress: ProgressLog
    outcome: dict[str, Any] = field(default_factory=dict)
    epochs_shown: int = 0
    cancelled: bool = False  # by the time budget or an interrupt: runs again when the sweep is resumed
    pruned: bool = False  # a TFoS-cluster trial the pruner stopped (a single-process trial stops itself)
    stop: threading.Event = field(default_factory=threading.Event)  # ends a TFoS-cluster trial
    restores_best: bool = False  # early stopping keeps the epoch of the lowest val_loss: its metric is the value


@dataclass
class Context:
    """What launching and finishing trials needs, in one place."""

    spark: SparkSession
    storage: Storage
    meta: DatasetMeta
    base_config: BaseConfig
    base_overrides: Sequence[str]
    sweep: SweepConfig
    dir: str
    study: SweepStudy
    trials: Trials
    server: tuple[str, int]
    secret: bytes
    run_id: str
    log: Callable[[str], None]
    notify: Guarded


def run(spark: SparkSession, base_config: BaseConfig, base_overrides: Sequence[str], sweep: SweepConfig, *,
        log: Callable[[str], None] = print, observer: SweepObserver | None = None) -> dict[str, Any]:
    """Run (or resume) the sweep; returns {"best": the best trial's result (None when none
    completed), "results": every trial's}. `observer` hears of the sweep's progress."""
    base = space_base(base_config, base_overrides)
    storage = Storage(spark)
    meta = node_inputs.read_dataset(storage, "train.dataset", base.train.dataset)  # refuses a directory that is not a dataset
    node_inputs.check_file_sizes(meta, *node_inputs.heap_of(spark.sparkContext))  # trials get their files through Spark
    user_code.ship(spark.sparkContext, model_kinds(sweep, base.train.model.kind), log)  # for the trials' executors
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
        notify("sweep_started", dataclasses.replace(sweep, storage=mask(sweep.storage)), sweep_dir, total)
        started = time.time()
        sc = spark.sparkContext
        trials = Trials(storage, study.should_prune)
        stack.callback(trials.close)
        secret = cc.new_secret()  # the sweep's; reaches the trials only inside their task closures
        bind, advertise = control_address(sc.getConf(), base.train.control_bind)
        server = ControlServer(secret, trials.handle, bind=bind, advertise=advertise,
                               ports=parse_ports(base.train.control_ports), log=log)
        address = server.start()
        stack.callback(server.stop)
        ctx = Context(spark, storage, meta, base_config, base_overrides, sweep, sweep_dir, study, trials, address,
                      secret, new_run_id(), log, notify)
        _run_trials(ctx, place, known, results, todo, total)
    best = sweep_report.finish(storage, sweep_dir, sweep, results, total, time.time() - started, log)
    rows = [results[n] for n in sorted(results)]
    notify("sweep_finished", best, rows, SweepDir(sweep_dir).best_model if best else None)
    return {"best": best, "results": rows}


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
    sweep, log, sc = ctx.sweep, ctx.log, ctx.spark.sparkContext
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
                ctx.notify("trial_finished", n, result)
            if deadline and time.time() > deadline and not budget_hit:
                budget_hit = True
                log(f"time budget of {sweep.time_budget_seconds} s used up: no new trials; "
                    f"stopping {len(running)} running trial(s) (re-run the sweep to continue)")
                todo.clear()
            if budget_hit:  # every poll: a trial thread may submit its job after an earlier cancel
                _cancel(sc, running.values())
    except BaseException:
        _cancel(sc, running.values())
        for trial in running.values():
            trial.thread.join(30)
        raise


def _cancel(sc, trials) -> None:
    for trial in trials:
        trial.cancelled = True
        trial.stop.set()
        sc.cancelJobGroup(trial.group)


def _open_dir(storage: Storage, sweep_dir: str, sweep: SweepConfig, base_train: dict[str, Any]) -> tuple[str, str]:
    """A new dir gets `sweep.json`; an existing one must hold the same sweep (resume): the
    same space, metric and algorithm over the same training settings. Returns the sweep's
    fingerprint and its study's name."""
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
    from tfos_jobs.jobs.sweep.executor.trial import task

    storage, sweep = ctx.storage, ctx.sweep
    settings = ctx.study.start(n, known_settings)
    directory = TrialDir.of(ctx.dir, n)
    resumed = _reset_trial_dir(storage, directory)
    directory.write_params(storage, settings)
    progress = ProgressLog(storage, directory.progress, resume=resumed)
    group = f"tfos-sweep-{ctx.run_id}-trial-{n:03d}"
    trial = Running(n, settings, group, threading.Thread(), time.time(), directory, progress)
    trial.epochs_shown = len(progress.lines())  # a resumed trial's earlier epochs (the study has them)
    ctx.trials.add(n, directory, progress)
    ctx.log(f"trial {n:03d} started: {_settings_text(sweep, settings)}")
    ctx.notify("trial_started", n, dict(settings))
    try:
        cfg = trial_config(ctx.base_config, ctx.base_overrides, sweep, settings)
    except ConfigError as e:  # a combination of values the config refuses: this trial fails, the sweep goes on
        trial.outcome["result"] = _record(ctx, trial, TrialStatus.FAILED, str(e))
        return trial
    # A held-out test split is for the model the sweep ends with, not for choosing it.
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, score_test=False))
    trial.restores_best = cfg.train.early_stopping_patience > 0

    if sweep.workers_per_trial > 1:
        target = _cluster_trial(ctx, cfg, trial)
    else:
        tr = dataclasses.replace(cfg.train, strategy=Strategy.LOCAL, tensorboard=False)
        wanted = node_inputs.everything(ctx.meta, node_inputs.files_of(ctx.meta, SPLITS))
        payload = TrialPayload(trial=n, settings=settings, metric=sweep.metric, pruning=sweep.early_stopping != Pruner.NONE,
                               args=NodeArgs.from_train_config(tr, dataset=ctx.meta.root), server=ctx.server,
                               run_id=ctx.run_id, local_dir=tr.local_dir, inputs=wanted)
        sc = ctx.spark.sparkContext

        def target():
            sc.setJobGroup(group, f"tfos sweep trial {n}", interruptOnCancel=True)
            try:
                trial.outcome["task"] = node_inputs.rdd(sc, ctx.meta, [wanted]) \
                    .mapPartitions(task(payload, ctx.secret)).collect()[0]
            except Exception as e:  # cancelled (time budget) or the task failed for good
                trial.outcome["error"] = e

    trial.thread = InheritableThread(target=target, name=f"tfos-trial-{n}")
    trial.thread.daemon = True
    trial.thread.start()
    return trial


def _cluster_trial(ctx: Context, cfg, trial: Running) -> Callable[[], None]:
    """A trial that is a TFoS cluster of `workers_per_trial` workers, trained as `tfos train` does;
    the pruner stops it through `trial.stop` (see `_watch_epochs`)."""
    from tfos_jobs.jobs import train

    tr = dataclasses.replace(cfg.train, workers=ctx.sweep.workers_per_trial, model_dir=trial.directory.path,
                             tensorboard=False)
    cfg = dataclasses.replace(cfg, train=tr)

    def target():
        spark = SparkSession.builder.getOrCreate()
        try:
            train.run(spark, cfg, overwrite=True, log=lambda line: None, stop=trial.stop, progress=trial.progress)
            trial.outcome["task"] = {"status": TrialStatus.COMPLETED.value, "error": None}
        except Exception as e:
            status = TrialStatus.PRUNED if trial.pruned else TrialStatus.FAILED
            trial.outcome["task"] = {"status": status.value, "error": None if trial.pruned else f"{type(e).__name__}: {e}"}

    return target


def _watch_epochs(ctx: Context, trial: Running) -> None:
    """Each new epoch of a trial, once: shown, told to the observer and reported to the study;
    a TFoS-cluster trial the pruner stops is stopped here (a single-process trial asks itself)."""
    lines = trial.progress.lines()
    for line in lines[trial.epochs_shown:]:
        ctx.log(sweep_report.epoch_line(ctx.sweep, trial.number, line))
        ctx.notify("trial_epoch", trial.number, line)
        value = line.get(ctx.sweep.metric)
        value = float(value) if isinstance(value, (int, float)) else None
        if ctx.sweep.workers_per_trial == 1:
            ctx.study.report(trial.number, int(line[EPOCH]), value)
        elif ctx.study.should_prune(trial.number, int(line[EPOCH]), value) and not trial.stop.is_set():
            ctx.log(f"  trial {trial.number:03d} pruned after epoch {line[EPOCH]}: stopping its cluster")
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
    traceback_text = ctx.trials.error(trial.number)
    if traceback_text:
        trial.directory.write_error(ctx.storage, traceback_text)
    return result


def _result_of(ctx: Context, trial: Running) -> TrialResult:
    if "result" in trial.outcome:
        return trial.outcome["result"]
    if trial.cancelled and not trial.pruned:  # no result file: the next run of the sweep runs it again
        return _record(ctx, trial, TrialStatus.CANCELLED, "stopped by the sweep's time budget")
    if "task" in trial.outcome:
        done = trial.outcome["task"]
        return _record(ctx, trial, TrialStatus(done["status"]), done["error"], done.get("host"), done.get("pid"))
    # The task never returned: it failed on every attempt.
    text = str(trial.outcome.get("error", "")).strip().splitlines()
    message = next((ln.strip() for ln in reversed(text) if "Error" in ln or "Exception" in ln),
                   text[0] if text else "the trial's Spark task failed on every attempt (see the executor logs)")
    return _record(ctx, trial, TrialStatus.FAILED, message)


def _settings_text(sweep: SweepConfig, settings: dict[str, ParamValue]) -> str:
    return ", ".join(f"{p.column}={settings[p.key]}" for p in sweep.params)
