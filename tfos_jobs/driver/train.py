"""The train job (driver side): start a TF cluster on the executors with TensorFlowOnSpark,
watch it, and report.

TFoS's `TFCluster.run/shutdown` stop the SparkContext and `sys.exit` on any error and wait
for tasks in fixed 5-second polls, so the driver uses TFoS's node runtime (`TFSparkNode.run`,
the reservation server) with its own supervision instead:
  * it waits for enough executors first, and fails with a clear message after
    `reservation_timeout` seconds if the cluster is too small;
  * the node job runs in a job group; when any node fails, the group is cancelled at once
    (a retried TF node could never rejoin its cluster) and the node's own traceback is reported;
  * the chief (or, on failure, the driver) writes `<run>/done`, on which parameter servers
    and PS workers return, so no task outlives the run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import random
import shutil
import socket
import threading
import time
import uuid
from collections import Counter
from typing import Any, Callable

from pyspark import InheritableThread
from pyspark.sql import SparkSession

from tfos_jobs import control_channel
from tfos_jobs.config import Config, TrainConfig, parse_ports
from tfos_jobs.data import meta as meta_mod
from tfos_jobs.driver.reservations import ReservationServer
from tfos_jobs.driver.progress import (ProgressPrinter, format_breakdown, plot_learning_curve, read_progress,
                                       step_breakdown)
from tfos_jobs.errors import ConfigError, OutputExistsError, TfosError
from tfos_jobs.model.builder import resolve_model_fn

POLL = 0.5


class TrainingError(TfosError):
    """Training failed; the message carries the failing node's own error.

    `retriable`: the failure came from the cluster (a lost executor, a broken connection, a
    hang), not from the model or the data, so a relaunch can resume the run."""

    def __init__(self, message: str, retriable: bool = False):
        super().__init__(message)
        self.retriable = retriable


# TensorFlow errors that mean a peer went away, not that the computation is wrong.
RETRIABLE_ERRORS = ("UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError")


def node_count(tr: TrainConfig) -> int:
    """Executors the TF cluster needs: MWMS uses `workers` (one of them the chief); PS adds a
    chief (the coordinator) and `ps` parameter servers to `workers`."""
    if tr.strategy == "parameter_server":
        return 1 + tr.workers + tr.ps
    return tr.workers


def gpu_conf(tr: TrainConfig, discovery_script: str) -> dict[str, str]:
    """Spark resource settings that give each TF node task `gpus_per_worker` GPUs."""
    if tr.gpus_per_worker <= 0:
        return {}
    amount = str(tr.gpus_per_worker)
    return {
        "spark.executor.resource.gpu.amount": amount,
        "spark.task.resource.gpu.amount": amount,
        "spark.executor.resource.gpu.discoveryScript": discovery_script,
        # standalone workers (and local-cluster) discover the GPUs they offer themselves
        "spark.worker.resource.gpu.amount": amount,
        "spark.worker.resource.gpu.discoveryScript": discovery_script,
    }


def run(spark: SparkSession, config: Config, *, overwrite: bool = False,
        log: Callable[[str], None] = print, stop: threading.Event | None = None) -> dict[str, Any]:
    """Train as configured; returns the metrics written to `<model_dir>/metrics.json`.

    Setting `stop` ends a TF cluster run early (a sweep's time budget): it fails with
    `TrainingError` and keeps its backup, so running it again resumes."""
    tr = config.train
    meta = meta_mod.read(tr.dataset)  # refuses a directory without _meta/manifest.json
    try:
        resolve_model_fn(tr.model.kind)  # a user model function must import here before nodes start
    except ValueError as e:
        raise ConfigError(str(e)) from None
    model_dir = os.path.abspath(tr.model_dir)
    _prepare_model_dir(model_dir, overwrite or tr.overwrite, log)
    log(f"training {tr.strategy} on {meta.manifest['splits']['train']['records']:,} records "
        f"({tr.epochs} epochs, batch {tr.batch_size}) into {model_dir}")
    started = time.time()
    printer = ProgressPrinter(f"{model_dir}/progress.jsonl", log)
    rejected: Counter = Counter()
    for attempt in range(1, tr.max_attempts + 1):
        run_dir = f"{model_dir}/_run/{time.strftime('%Y%m%d-%H%M%S-')}{uuid.uuid4().hex[:6]}"
        os.makedirs(f"{run_dir}/nodes", exist_ok=True)
        args = _node_args(tr, os.path.abspath(tr.dataset), model_dir, run_dir)
        try:
            if tr.strategy == "local":
                _run_local(args, printer)
            else:
                _run_cluster(spark, tr, args, run_dir, printer, rejected, stop)
            break
        except TrainingError as e:
            if not e.retriable or attempt == tr.max_attempts:
                raise
            log(f"attempt {attempt} of {tr.max_attempts} failed: {e}\nrelaunching the TF cluster; "
                "training resumes from the last finished epoch")
    printer.poll()
    return _finish(model_dir, run_dir, tr, attempt, time.time() - started, log, rejected)


def _prepare_model_dir(model_dir: str, overwrite: bool, log: Callable[[str], None]) -> None:
    """A trained model is kept unless --overwrite; an interrupted run is resumed from its
    backup (the progress log goes on), anything else left behind is cleared."""
    if os.path.exists(f"{model_dir}/saved_model") or os.path.exists(f"{model_dir}/metrics.json"):
        if not overwrite:
            raise OutputExistsError(f"model directory {model_dir!r} holds a trained model; pass --overwrite to replace it")
        shutil.rmtree(model_dir)
    elif os.path.isdir(f"{model_dir}/backup") and os.listdir(f"{model_dir}/backup"):
        log(f"resuming the unfinished run in {model_dir} from its last finished epoch")
    elif os.path.exists(f"{model_dir}/progress.jsonl"):
        os.remove(f"{model_dir}/progress.jsonl")
    os.makedirs(model_dir, exist_ok=True)


def _node_args(tr: TrainConfig, dataset: str, model_dir: str, run_dir: str) -> dict[str, Any]:
    """Plain values only: this dict is pickled to every executor."""
    return {
        "strategy": tr.strategy, "num_ps": tr.ps if tr.strategy == "parameter_server" else 0,
        "dataset": dataset, "model_dir": model_dir, "run_dir": run_dir,
        "epochs": tr.epochs, "steps_per_epoch": tr.steps_per_epoch, "batch_size": tr.batch_size,
        "optimizer": tr.optimizer, "learning_rate": tr.learning_rate,
        "early_stopping_patience": tr.early_stopping_patience, "shuffle_buffer": tr.shuffle_buffer,
        "seed": tr.seed, "in_memory_mb": tr.in_memory_mb, "tensorboard": tr.tensorboard, "model": dataclasses.asdict(tr.model),
        "steps_per_execution": tr.steps_per_execution, "dense_gradient_limit": tr.dense_gradient_limit,
        "threads": tr.threads, "profile_steps": tr.profile_steps,
        "max_node_seconds": 7 * 24 * 3600,
    }


def _run_local(args: dict[str, Any], printer: ProgressPrinter) -> None:
    """One process, no TF cluster: in a thread, so progress prints as it goes."""
    from tfos_jobs.executor import training

    failure: list[BaseException] = []
    _write_time(f"{args['run_dir']}/launched")

    def target():
        try:
            if args["threads"]:
                training.configure_threads(args["threads"])
            training.fit_and_export(args, role="chief", worker_index=0, num_workers=1)
        except BaseException as e:  # reported below, in the caller's thread
            failure.append(e)

    thread = threading.Thread(target=target, name="tfos-local-train")
    thread.start()
    while thread.is_alive():
        printer.poll()
        thread.join(POLL)
    if failure:
        e = failure[0]
        raise TrainingError(f"local training failed: {type(e).__name__}: {e}") from e


def _run_cluster(spark: SparkSession, tr: TrainConfig, args: dict[str, Any], run_dir: str,
                 printer: ProgressPrinter, rejected: Counter, stop: threading.Event | None = None) -> None:
    """`rejected` counts, per peer address, control messages the reservation server refused."""
    from tensorflowonspark import TFSparkNode

    from tfos_jobs.executor.node import guard, main_fun

    sc = spark.sparkContext
    nodes = node_count(tr)
    _wait_for_executors(sc, nodes, tr)
    _write_time(f"{run_dir}/launched")
    secret = control_channel.new_secret()  # this run's; reaches the nodes only inside the task closure
    bind, advertise = control_address(sc.getConf(), tr.control_bind)
    server = ReservationServer(nodes, secret, bind=bind, advertise=advertise, ports=parse_ports(tr.control_ports),
                               log=printer.log)
    template = {"chief": [0]} | ({"worker": list(range(1, nodes))} if nodes > 1 else {})
    default_fs = sc._jsc.hadoopConfiguration().get("fs.defaultFS").rstrip("/")
    cluster_meta = {
        "id": random.getrandbits(64), "cluster_template": template, "num_executors": nodes,
        "default_fs": default_fs, "working_dir": os.getcwd(), "server_addr": server.start(), "release_port": True,
    }
    group = f"tfos-train-{os.path.basename(run_dir)}"
    outcome: dict[str, Any] = {}

    def start_nodes():
        sc.setJobGroup(group, f"tfos train: {nodes} TF nodes", interruptOnCancel=True)
        try:
            node_fn = guard(TFSparkNode.run(main_fun, args, cluster_meta, False, None, ["error"], False),
                            run_dir, tr.strategy, secret, parse_ports(tr.tf_ports))
            node_rdd = sc.parallelize(range(nodes), nodes).mapPartitions(node_fn)
            with _own_python_workers(sc, os.path.basename(run_dir)):
                node_rdd._jrdd  # the Python function is wrapped here, with this run's environment
            node_rdd.collect()
            outcome["ok"] = True
        except Exception as e:  # reported by the supervising loop
            outcome["error"] = e

    thread = InheritableThread(target=start_nodes, name="tfos-nodes")
    thread.daemon = True
    thread.start()
    try:
        _await_reservations(server, outcome, tr.reservation_timeout, nodes, run_dir)
        _write_time(f"{run_dir}/reserved")
        running_since = time.time()
        lost = LostWorkers(tr, run_dir, printer.log)
        while thread.is_alive():
            printer.poll()
            if stop is not None and stop.is_set():
                raise TrainingError("stopped before the end (the run's backup is kept: running it again resumes)")
            failed = _failed_nodes(run_dir)
            task_failures = _failed_tasks(sc, group)
            if not failed and lost.tolerated(task_failures):
                thread.join(POLL)
                continue
            if failed or task_failures:
                time.sleep(2 * POLL)  # let the other nodes' errors land too: the first one is often a symptom
                failed = _failed_nodes(run_dir)
                raise TrainingError(_failure_message(run_dir, failed, outcome), retriable=_retriable(failed))
            idle = time.time() - max(running_since, _heartbeat(run_dir))
            if idle > tr.step_timeout:
                raise TrainingError(f"no training step finished in the last {idle:.0f} s "
                                    f"(train.step_timeout = {tr.step_timeout} s): a TF node hangs", retriable=True)
            thread.join(POLL)
        lost.report()  # a lost worker's retry may record it just before the run ends
        if "error" in outcome:
            failed = _failed_nodes(run_dir)
            raise TrainingError(_failure_message(run_dir, failed, outcome), retriable=_retriable(failed))
    except BaseException:
        _abort(sc, group, run_dir, thread)
        raise
    finally:
        server.stop()
        if server.rejected:
            printer.log(f"control channel: rejected {sum(server.rejected.values())} message(s) from "
                        f"{', '.join(sorted(server.rejected))} during this run")
        rejected.update(server.rejected)


_ENVIRONMENT_LOCK = threading.Lock()


@contextlib.contextmanager
def _own_python_workers(sc, run_id: str):
    """Spark keeps one pool of Python workers per environment: a variable naming the run
    gives the run's TF nodes fresh processes. A process that hosted a TF node cannot host
    another (collective ops and the TF server are configured once per process), and the
    pooled workers of UDFs and sweep trials are not disturbed."""
    with _ENVIRONMENT_LOCK:
        sc.environment["TFOS_TF_RUN"] = run_id
        try:
            yield
        finally:
            sc.environment.pop("TFOS_TF_RUN", None)


def _wait_for_executors(sc, nodes: int, tr: TrainConfig) -> None:
    """TFoS needs one executor per TF node; fail clearly rather than hang when there are too few."""
    master = sc.master
    if master.startswith("local") and not master.startswith("local-cluster"):
        raise TrainingError(
            f"strategy {tr.strategy!r} needs {nodes} Spark executors, but master {master!r} runs everything in "
            "the driver; use local-cluster[N,1,MB], a real cluster, or train.strategy = \"local\"")
    deadline = time.monotonic() + tr.reservation_timeout
    while True:
        have = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
        if have >= nodes:
            return
        if time.monotonic() > deadline:
            raise TrainingError(
                f"the TF cluster needs {nodes} executors ({_layout(tr)}), but only {have} registered within "
                f"train.reservation_timeout = {tr.reservation_timeout} s")
        time.sleep(POLL)


def _layout(tr: TrainConfig) -> str:
    if tr.strategy == "parameter_server":
        return f"1 chief + {tr.workers} workers + {tr.ps} ps"
    return f"{tr.workers} workers, one of them the chief"


def control_address(conf, configured: str) -> tuple[str, str]:
    """(address the reservation server binds to, address the nodes connect to): the configured
    one, else Spark's driver bind address, else the driver host Spark advertises. A wildcard
    bind is advertised as the driver host."""
    host = conf.get("spark.driver.host", None) or socket.gethostbyname(socket.gethostname())
    bind = configured or conf.get("spark.driver.bindAddress", None) or host
    return bind, host if bind in ("0.0.0.0", "::", "") else bind


def _await_reservations(server: ReservationServer, outcome: dict[str, Any], timeout: float, nodes: int,
                        run_dir: str) -> None:
    deadline = time.monotonic() + timeout
    while not server.done():
        failed = _failed_nodes(run_dir)
        if "error" in outcome or failed:
            raise TrainingError(_failure_message(run_dir, failed, outcome), retriable=_retriable(failed))
        if time.monotonic() > deadline:
            raise TrainingError(
                f"only {nodes - server.remaining()} of {nodes} TF nodes started within "
                f"train.reservation_timeout = {timeout:.0f} s (are {nodes} executors free, with one task slot each?)")
        time.sleep(POLL)


def _write_time(path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(repr(time.time()))


def _read_time(path: str) -> float | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return float(fh.read())
    except (OSError, ValueError):
        return None


def startup(run_dir: str) -> dict[str, float]:
    """Seconds from starting the reservation server (executors already there) to every node
    reserved, and to the chief's first finished step."""
    launched = _read_time(f"{run_dir}/launched")
    if launched is None:
        return {}
    out = {}
    for name, key in (("reserved", "to_reserved_seconds"), ("first_step", "to_first_step_seconds")):
        at = _read_time(f"{run_dir}/{name}")
        if at is not None:
            out[key] = round(at - launched, 3)
    return out


def _heartbeat(run_dir: str) -> float:
    """When the chief last finished a step (it touches `<run>/heartbeat` every few seconds)."""
    try:
        return os.path.getmtime(f"{run_dir}/heartbeat")
    except OSError:
        return 0.0


def _retriable(failed: list[str]) -> bool:
    """Retry a lost executor (no node reported an error) or a peer failure; not a code error."""
    for path in failed:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if not any(name in text for name in RETRIABLE_ERRORS):
            return False
    return True


def _failed_nodes(run_dir: str) -> list[str]:
    return sorted(glob.glob(f"{run_dir}/nodes/*.error"))


def _failed_tasks(sc, group: str) -> int:
    """Failed task attempts of the run's node job: a node's executor was lost, or its task raised."""
    tracker = sc.statusTracker()
    count = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else []:
            stage = tracker.getStageInfo(stage_id)
            count += stage.numFailedTasks if stage else 0
    return count


def lost_nodes(run_dir: str) -> list[str]:
    """Nodes whose retried task recorded them as lost (executor.node.guard)."""
    return sorted(os.path.basename(p).removesuffix(".lost") for p in glob.glob(f"{glob.escape(run_dir)}/nodes/*.lost"))


class LostWorkers:
    """Parameter-server training goes on when a worker is lost: the chief's coordinator gives
    the lost worker's steps to the others. A failed node task is a lost worker once its retry
    has recorded `nodes/worker-<i>.lost` (executor.node.guard); the retry may first wait for a
    free executor, for up to `train.reservation_timeout` seconds. Any other failure, or the
    loss of every worker, fails the attempt."""

    def __init__(self, tr: TrainConfig, run_dir: str, log: Callable[[str], None]):
        self.tr, self.run_dir, self.log = tr, run_dir, log
        self.reported: list[str] = []
        self.waiting_since: float | None = None

    def report(self) -> list[str]:
        """Logs each newly lost worker once; returns all lost so far."""
        names = lost_nodes(self.run_dir)
        for name in names:
            if name not in self.reported:
                left = self.tr.workers - len(names)
                self.log(f"TF node {name} was lost with its executor; training goes on with {left} worker(s)")
                self.reported.append(name)
        return names

    def tolerated(self, task_failures: int) -> bool:
        if self.tr.strategy != "parameter_server" or task_failures == 0:
            return False
        names = self.report()
        if len(names) >= self.tr.workers:
            raise TrainingError(f"all {self.tr.workers} parameter-server workers were lost with their executors "
                                f"({', '.join(names)})", retriable=True)
        if len(names) >= task_failures:
            self.waiting_since = None
            return True
        self.waiting_since = self.waiting_since or time.monotonic()
        return time.monotonic() - self.waiting_since < self.tr.reservation_timeout


def _failure_message(run_dir: str, failed: list[str], outcome: dict[str, Any]) -> str:
    if failed:
        parts = []
        for path in failed:
            with open(path, encoding="utf-8") as fh:
                lines = [ln for ln in fh.read().strip().splitlines() if ln.strip()]
            node = os.path.basename(path).removesuffix(".error")
            parts.append(f"TF node {node} failed: {lines[-1] if lines else '(no message)'}\n  full traceback: {path}")
        return "\n".join(parts)
    if "error" in outcome:
        text = str(outcome["error"]).strip().splitlines()
        return "a TF node task failed: " + next((ln for ln in reversed(text) if "Error" in ln or "Exception" in ln),
                                                  text[-1] if text else "unknown error")
    return "a TF node task failed (see the executor logs)"


def _abort(sc, group: str, run_dir: str, thread: threading.Thread) -> None:
    """Stop every node of the run: serving nodes see `done`, the rest are cancelled."""
    from tfos_jobs.executor import lifecycle

    try:
        lifecycle.mark_done(run_dir, "failed")
    except Exception:
        pass
    sc.cancelJobGroup(group)
    thread.join(60)


def _finish(model_dir: str, run_dir: str, tr: TrainConfig, attempts: int, seconds: float,
            log: Callable[[str], None], rejected: Counter) -> dict[str, Any]:
    epochs = read_progress(f"{model_dir}/progress.jsonl")
    with open(f"{run_dir}/result.json", encoding="utf-8") as fh:
        result = json.load(fh)
    nodes = []
    for path in sorted(glob.glob(f"{run_dir}/nodes/*.json")):
        with open(path, encoding="utf-8") as fh:
            node = json.load(fh)
        nodes.append({k: node[k] for k in ("role", "index", "executor_id", "cuda_visible_devices", "pid", "manager_pid")})
    metrics = {
        "strategy": tr.strategy, "nodes": nodes, "attempts": attempts,
        "epochs": max((e["epoch"] for e in epochs), default=result["epochs_run"]),
        "steps_per_epoch": result["steps_per_epoch"],
        "seconds": round(seconds, 1), "startup": startup(run_dir), "final": result["final"],
        "lost_nodes": lost_nodes(run_dir),
        "control": {"rejected_messages": sum(rejected.values()), "rejected_from": sorted(rejected)},
        "step_profile": step_breakdown(epochs, result.get("step_profile"), result["steps_per_epoch"],
                                       tr.workers if tr.strategy == "parameter_server" else 1),
        "eval": {k.removeprefix("val_"): v for k, v in result["final"].items() if k.startswith("val_")},
        "history": epochs,
        "saved_model": f"{model_dir}/saved_model",
    }
    with open(f"{model_dir}/metrics.json", "w", encoding="utf-8") as fh:
        json.dump(metrics, fh, indent=2)
    with open(f"{model_dir}/sample_predictions.json", "w", encoding="utf-8") as fh:
        json.dump(result["sample"], fh)  # the trained model's outputs on a few eval rows
    if epochs:
        plot_learning_curve(epochs, f"{model_dir}/learning_curve.png", f"{tr.strategy}, {len(epochs)} epochs")
    shutil.rmtree(f"{model_dir}/_run", ignore_errors=True)  # this run's records and failed attempts'
    if os.path.isdir(f"{model_dir}/backup") and not os.listdir(f"{model_dir}/backup"):
        os.rmdir(f"{model_dir}/backup")  # BackupAndRestore empties it when training ends well
    shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics["eval"].items())
    log(f"trained in {seconds:.1f} s; eval: {shown}")
    if metrics["step_profile"]:
        log(format_breakdown(metrics["step_profile"]))
    log(f"saved model: {metrics['saved_model']}")
    return metrics
