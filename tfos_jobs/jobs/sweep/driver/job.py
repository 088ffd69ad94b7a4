"""The sweep job (driver side): propose trials, run them in parallel as Spark tasks, watch
them, and report.

`<sweep_dir>/` holds everything, so a sweep can be resumed and inspected, on any filesystem
the session reaches (the driver writes it all):
  sweep.json                  the sweep's definition (a different sweep refuses the dir)
  trial-<n>/                  one trial (contracts.sweep_dir.TrialDir)
  results.parquet/.csv, sweep.png, best/saved_model
Each single-process trial is one Spark job of one task, in its own job group, started from
a driver thread: Spark places it on a free executor slot, hands it the dataset's files, and
the time budget cancels it. Trials report to the sweep's control server (`Trials`), which
keeps each one's progress and publishes what it hands over.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pyspark import InheritableThread
from pyspark.sql import SparkSession

from tfos_jobs import config as config_mod
from tfos_jobs import control_channel as cc
from tfos_jobs.config import parse_ports
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.trial import TrialPayload
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.jobs.train.driver import node_inputs
from tfos_jobs.jobs.sweep.driver import report as sweep_report
from tfos_jobs.jobs.train.driver.control_server import ControlServer
from tfos_jobs.jobs.train.driver.tf_cluster import control_address
from tfos_jobs.jobs.train.driver.job import new_run_id, read_dataset, targets
from tfos_jobs.jobs.train.driver.transfers import FILE_MESSAGES, Transfers
from tfos_jobs.errors import ConfigError, OutputExistsError
from tfos_jobs.progress_log import EPOCH, EPOCHS, EXAMPLES_PER_SEC, ProgressLog
from tfos_jobs.search import samplers
from tfos_jobs.search.space import ParamValue, SweepConfig, trial_config
from tfos_jobs.contracts.sweep_dir import SweepDir, TrialDir
from tfos_jobs.search.trials import FINISHED, TrialResult, TrialStatus, trial_result
from tfos_jobs.storage import Storage, named
from tfos_jobs.topology import Strategy

POLL = 0.5


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
    stop: threading.Event = field(default_factory=threading.Event)  # ends a TFoS-cluster trial


class Trials:
    """The sweep's side of the control channel: each trial's progress (the median rule compares
    them), its traceback, and the files it publishes into its directory."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self._lock = threading.Lock()
        self._progress: dict[int, ProgressLog] = {}
        self._transfers: dict[int, Transfers] = {}
        self._errors: dict[int, str] = {}

    def add(self, number: int, directory: TrialDir, progress: ProgressLog) -> None:
        with self._lock:
            self._progress[number] = progress
            old = self._transfers.pop(number, None)
            self._transfers[number] = Transfers(self.storage, targets(directory))
            self._errors.pop(number, None)
        if old is not None:
            old.close()

    def known(self, number: int, progress: ProgressLog) -> None:
        """A trial of an earlier run: its epochs count for the median rule."""
        with self._lock:
            self._progress.setdefault(number, progress)

    def error(self, number: int) -> str | None:
        with self._lock:
            return self._errors.get(number)

    def handle(self, kind: str, message: dict[str, Any]) -> Any:
        number = message.get(cc.SENDER_TRIAL)
        with self._lock:
            if number not in self._transfers:
                raise cc.ControlError(f"no running trial {number!r}")
            transfers, progress = self._transfers[number], self._progress[number]
            others = [p for n, p in self._progress.items() if n != number]
        if kind in FILE_MESSAGES:
            return transfers.handle(kind, message)
        if kind == cc.PROGRESS:
            line = message.get("line")
            if not isinstance(line, dict):
                raise cc.ControlError("a progress report needs its line")
            progress.add(line)
            return None
        if kind == cc.OTHERS:
            return {"own": progress.lines(), "others": [p.lines() for p in others]}
        if kind == cc.FAILED:
            with self._lock:
                self._errors[number] = str(message.get("text", ""))
            return None
        if kind in (cc.FIRST_STEP, cc.BEAT, cc.RESULT):
            return None  # a trial's own result comes back with its task
        raise cc.ControlError(f"unknown message type {kind!r} from a trial")

    def close(self) -> None:
        with self._lock:
            for transfers in self._transfers.values():
                transfers.close()


@dataclass
class Context:
    """What launching and finishing trials needs, in one place."""

    spark: SparkSession
    storage: Storage
    meta: DatasetMeta
    base_config: str
    base_overrides: Sequence[str]
    sweep: SweepConfig
    dir: str
    trials: Trials
    server: tuple[str, int]
    secret: bytes
    run_id: str
    log: Callable[[str], None]


def run(spark: SparkSession, base_config: str, base_overrides: Sequence[str], sweep: SweepConfig, *,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the sweep; returns the best trial's result (None when none completed)."""
    base = config_mod.load(base_config, base_overrides)
    storage = Storage(spark)
    meta = read_dataset(storage, "train.dataset", base.train.dataset)  # refuses a directory that is not a dataset
    if sweep.workers_per_trial > 1 and base.train.strategy == Strategy.LOCAL:
        raise ConfigError("sweep.workers_per_trial > 1 makes every trial a TF cluster: set train.strategy to "
                          "multi_worker_mirrored or parameter_server")
    with named("sweep.dir", sweep.dir):
        sweep_dir = storage.qualify(sweep.dir)
    storage.check_writable("sweep.dir", sweep_dir)
    _open_dir(storage, sweep_dir, sweep, dataclasses.asdict(base.train))
    sampler = samplers.make(sweep)
    known = {n: {"settings": d.read_params(storage), "result": d.read_result(storage), "directory": d}
             for n, d in TrialDir.all_in(storage, sweep_dir).items()}
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
    trials = Trials(storage)
    for n, t in known.items():
        trials.known(n, ProgressLog(storage, t["directory"].progress, resume=True))
    secret = cc.new_secret()  # the sweep's; reaches the trials only inside their task closures
    bind, advertise = control_address(sc.getConf(), base.train.control_bind)
    server = ControlServer(secret, trials.handle, bind=bind, advertise=advertise,
                           ports=parse_ports(base.train.control_ports), log=log)
    ctx = Context(spark, storage, meta, base_config, base_overrides, sweep, sweep_dir, trials, server.start(), secret,
                  new_run_id(), log)
    started = time.time()
    deadline = started + sweep.time_budget_seconds if sweep.time_budget_seconds else None
    running: dict[int, Running] = {}
    budget_hit = False
    try:
        while todo or running:
            while todo and len(running) < sweep.max_parallel_trials and not budget_hit:
                n = todo.pop(0)
                settings = known[n]["settings"] if n in known else sampler.propose(n - 1)
                running[n] = _launch(ctx, n, settings)
            time.sleep(POLL)
            for n, trial in list(running.items()):
                _show_epochs(sweep, trial, log)
                if trial.thread.is_alive():
                    continue
                del running[n]
                result = _result_of(ctx, trial)
                results[n] = result
                sampler.tell(n - 1, result["settings"], result["status"], result["value"])
                log(_finished_line(sweep, result, results, total, len(running)))
                sweep_report.write_table(storage, sweep_dir, sweep, list(results.values()))
            if deadline and time.time() > deadline and not budget_hit:
                budget_hit = True
                log(f"time budget of {sweep.time_budget_seconds} s used up: no new trials; "
                    f"stopping {len(running)} running trial(s) (re-run the sweep to continue)")
                todo = []
            if budget_hit:  # every poll: a trial thread may submit its job after an earlier cancel
                _cancel(sc, running.values())
    except BaseException:
        _cancel(sc, running.values())
        for trial in running.values():
            trial.thread.join(30)
        raise
    finally:
        server.stop()
        trials.close()
    return _report(storage, sweep_dir, sweep, results, total, time.time() - started, log)


def _cancel(sc, trials) -> None:
    for trial in trials:
        trial.cancelled = True
        trial.stop.set()
        sc.cancelJobGroup(trial.group)


def _open_dir(storage: Storage, sweep_dir: str, sweep: SweepConfig, base_train: dict[str, Any]) -> None:
    """A new dir gets `sweep.json`; an existing one must hold the same sweep (resume): the
    same space, metric and algorithm over the same training settings."""
    path = SweepDir(sweep_dir).definition
    fingerprint = hashlib.sha256(f"{sweep.fingerprint()}{json.dumps(base_train, sort_keys=True)}".encode()).hexdigest()[:16]
    if storage.exists(path):
        try:
            old = json.loads(storage.read_text(path))
        except Exception as e:
            raise ConfigError(f"{path} cannot be read ({e}); delete the sweep directory to start over") from None
        if old.get("fingerprint") != fingerprint:
            raise OutputExistsError(
                f"{sweep_dir} holds a different sweep (its space, metric, algorithm or training settings differ); "
                "use another sweep.dir, or delete that directory to start over")
        return
    if storage.children(sweep_dir):
        raise OutputExistsError(f"{sweep_dir} exists and is not a sweep directory; choose another sweep.dir")
    storage.write_text(path, json.dumps({"fingerprint": fingerprint, "sweep": dataclasses.asdict(sweep),
                                         "train": base_train}, indent=2, default=str))


def _launch(ctx: Context, n: int, settings: dict[str, ParamValue]) -> Running:
    from tfos_jobs.jobs.sweep.executor.trial import task

    storage, sweep = ctx.storage, ctx.sweep
    directory = TrialDir.of(ctx.dir, n)
    resumed = _reset_trial_dir(storage, directory)
    directory.write_params(storage, settings)
    progress = ProgressLog(storage, directory.progress, resume=resumed)
    group = f"tfos-sweep-{ctx.run_id}-trial-{n:03d}"
    trial = Running(n, settings, group, threading.Thread(), time.time(), directory, progress)
    trial.epochs_shown = len(progress.lines())  # a resumed trial's earlier epochs
    ctx.trials.add(n, directory, progress)
    ctx.log(f"trial {n:03d} started: {_settings_text(sweep, settings)}")
    try:
        cfg = trial_config(ctx.base_config, ctx.base_overrides, sweep, settings)
    except ConfigError as e:  # a combination of values the config refuses: this trial fails, the sweep goes on
        trial.outcome["result"] = _record(ctx, trial, TrialStatus.FAILED, str(e))
        return trial

    if sweep.workers_per_trial > 1:
        target = _cluster_trial(ctx, cfg, trial)
    else:
        tr = dataclasses.replace(cfg.train, strategy=Strategy.LOCAL, tensorboard=False)
        wanted = node_inputs.everything(ctx.meta)
        payload = TrialPayload(trial=n, settings=settings, metric=sweep.metric, goal=sweep.goal,
                               early_stopping=sweep.early_stopping == "median", warmup_epochs=sweep.warmup_epochs,
                               min_trials=sweep.min_trials, args=NodeArgs.from_train_config(tr, dataset=ctx.meta.root),
                               server=ctx.server, run_id=ctx.run_id, local_dir=tr.local_dir, inputs=wanted)
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
    """A trial that is a TFoS cluster of `workers_per_trial` workers, trained as `tfos train` does."""
    from tfos_jobs.jobs.train.driver import job as train

    tr = dataclasses.replace(cfg.train, workers=ctx.sweep.workers_per_trial, model_dir=trial.directory.path,
                             tensorboard=False)
    cfg = dataclasses.replace(cfg, train=tr)

    def target():
        spark = SparkSession.builder.getOrCreate()
        try:
            train.run(spark, cfg, overwrite=True, log=lambda line: None, stop=trial.stop, progress=trial.progress)
            trial.outcome["task"] = {"status": TrialStatus.COMPLETED.value, "error": None}
        except Exception as e:
            trial.outcome["task"] = {"status": TrialStatus.FAILED.value, "error": f"{type(e).__name__}: {e}"}

    return target


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
                          trial.started, host, pid)
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
    if trial.cancelled:  # no result file: the next run of the sweep runs it again
        return _record(ctx, trial, TrialStatus.CANCELLED, "stopped by the sweep's time budget")
    if "task" in trial.outcome:
        done = trial.outcome["task"]
        return _record(ctx, trial, TrialStatus(done["status"]), done["error"], done.get("host"), done.get("pid"))
    # The task never returned: it failed on every attempt.
    text = str(trial.outcome.get("error", "")).strip().splitlines()
    message = next((ln.strip() for ln in reversed(text) if "Error" in ln or "Exception" in ln),
                   text[0] if text else "the trial's Spark task failed on every attempt (see the executor logs)")
    return _record(ctx, trial, TrialStatus.FAILED, message)


def _show_epochs(sweep: SweepConfig, trial: Running, log: Callable[[str], None]) -> None:
    lines = trial.progress.lines()
    for line in lines[trial.epochs_shown:]:
        value = line.get(sweep.metric)
        shown = f"{sweep.metric} {value:.4f}" if isinstance(value, (int, float)) else ""
        log(f"  trial {trial.number:03d} epoch {line[EPOCH]}/{line[EPOCHS]}  {shown}  "
            f"loss {line.get('loss', float('nan')):.4f}  {line.get(EXAMPLES_PER_SEC, 0):,.0f} ex/s")
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


def _report(storage: Storage, sweep_dir: str, sweep: SweepConfig, results: dict[int, dict[str, Any]], total: int,
            seconds: float, log: Callable[[str], None]) -> dict[str, Any]:
    rows = [results[n] for n in sorted(results)]
    if not rows:
        raise ConfigError("the sweep ran no trial (is the time budget too small?)")
    table = sweep_report.write_table(storage, sweep_dir, sweep, rows)
    sweep_report.plot(storage, sweep_dir, sweep, rows)
    best = sweep_report.export_best(storage, sweep_dir, sweep, rows)
    log(sweep_report.leaderboard(sweep, rows))
    counts = {s: sum(r["status"] == s for r in rows) for s in TrialStatus}
    log(f"sweep finished in {seconds:.0f} s: " + ", ".join(f"{v} {k.value}" for k, v in counts.items() if v)
        + (f"; {total - len(rows)} not run" if len(rows) < total else ""))
    log(f"results: {table}.parquet, {table}.csv; plot: {SweepDir(sweep_dir).plot}")
    if best:
        log(f"best: trial {best['trial']:03d}, {sweep.metric} {best['value']:.4f}; "
            f"model: {SweepDir(sweep_dir).best_model}")
    else:
        log("no trial completed: no best model")
    return {"best": best, "results": rows}
