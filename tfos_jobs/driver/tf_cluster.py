"""Start a TF cluster on the executors with TensorFlowOnSpark, supervise it to its end.

TFoS's `TFCluster.run/shutdown` stop the SparkContext and `sys.exit` on any error and wait
for tasks in fixed 5-second polls, so this uses TFoS's node runtime (`TFSparkNode.run`) with
its own reservation server (authenticated, `driver.reservations`) and supervision:
  * it waits for enough executors first, and fails with a clear message after
    `reservation_timeout` seconds if the cluster is too small;
  * the node job runs in a job group; when any node fails, the group is cancelled at once
    (a retried TF node could never rejoin its cluster) and the node's own traceback is reported;
  * the chief (or, on failure, the driver) marks the run done, on which parameter servers
    and PS workers return, so no task outlives the run.
Training (`driver.train`) and sweeps with TF-cluster trials both come through `run_cluster`.
"""
from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from collections import Counter
from typing import Any, Callable

from pyspark import InheritableThread

from tfos_jobs import control_channel
from tfos_jobs.config import TrainConfig, node_count, parse_ports
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.run_dir import FIRST_STEP, LAUNCHED, RESERVED, RunDir
from tfos_jobs.driver.failure_policy import failure_message, retriable
from tfos_jobs.driver.reservations import ReservationServer
from tfos_jobs.errors import TrainingError

POLL = 0.5


def run_cluster(sc, tr: TrainConfig, args: NodeArgs, run: RunDir, log: Callable[[str], None],
                poll: Callable[[], None], rejected: Counter, stop: threading.Event | None = None) -> None:
    """Train one attempt on a TF cluster; returns when the chief has finished.

    `poll` is called while nodes run (progress lines); `rejected` counts, per peer address,
    control messages the reservation server refused; setting `stop` ends the attempt early
    with `TrainingError`. Raises `TrainingError` (retriable or not) on any failure, after
    every node of the attempt has stopped."""
    from tensorflowonspark import TFSparkNode

    from tfos_jobs.executor.node import guard, main_fun

    nodes = node_count(tr)
    _wait_for_executors(sc, nodes, tr)
    run.mark_time(LAUNCHED)
    secret = control_channel.new_secret()  # this run's; reaches the nodes only inside the task closure
    bind, advertise = control_address(sc.getConf(), tr.control_bind)
    server = ReservationServer(nodes, secret, bind=bind, advertise=advertise, ports=parse_ports(tr.control_ports),
                               log=log)
    template = {"chief": [0]} | ({"worker": list(range(1, nodes))} if nodes > 1 else {})
    default_fs = sc._jsc.hadoopConfiguration().get("fs.defaultFS").rstrip("/")
    cluster_meta = {
        "id": random.getrandbits(64), "cluster_template": template, "num_executors": nodes,
        "default_fs": default_fs, "working_dir": os.getcwd(), "server_addr": server.start(), "release_port": True,
    }
    group = f"tfos-train-{run.id}"
    outcome: dict[str, Any] = {}

    def start_nodes():
        sc.setJobGroup(group, f"tfos train: {nodes} TF nodes", interruptOnCancel=True)
        try:
            node_fn = guard(TFSparkNode.run(main_fun, args.to_dict(), cluster_meta, False, None, ["error"], False),
                            run.path, tr.strategy, secret, parse_ports(tr.tf_ports), nodes)
            node_rdd = sc.parallelize(range(nodes), nodes).mapPartitions(node_fn)
            with _own_python_workers(sc, run.id):
                node_rdd._jrdd  # the Python function is wrapped here, with this run's environment
            node_rdd.collect()
            outcome["ok"] = True
        except Exception as e:  # reported by the supervising loop
            outcome["error"] = e

    thread = InheritableThread(target=start_nodes, name="tfos-nodes")
    thread.daemon = True
    thread.start()
    try:
        _await_reservations(server, outcome, tr.reservation_timeout, nodes, run)
        run.mark_time(RESERVED)
        running_since = time.time()
        lost = LostWorkers(tr, run, log)
        while thread.is_alive():
            poll()
            if stop is not None and stop.is_set():
                raise TrainingError("stopped before the end (the run's backup is kept: running it again resumes)")
            failed = run.failed_nodes()
            task_failures = _failed_tasks(sc, group)
            if not failed and lost.tolerated(task_failures):
                thread.join(POLL)
                continue
            if failed or task_failures:
                time.sleep(2 * POLL)  # let the other nodes' errors land too: the first one is often a symptom
                raise _failure(run, outcome)
            idle = time.time() - max(running_since, run.last_beat())
            if idle > tr.step_timeout:
                raise TrainingError(f"no training step finished in the last {idle:.0f} s "
                                    f"(train.step_timeout = {tr.step_timeout} s): a TF node hangs", retriable=True)
            thread.join(POLL)
        lost.report()  # a lost worker's retry may record it just before the run ends
        if "error" in outcome:
            raise _failure(run, outcome)
    except BaseException:
        _abort(sc, group, run, thread)
        raise
    finally:
        server.stop()
        if server.rejected:
            log(f"control channel: rejected {sum(server.rejected.values())} message(s) from "
                f"{', '.join(sorted(server.rejected))} during this run")
        rejected.update(server.rejected)


def _failure(run: RunDir, outcome: dict[str, Any]) -> TrainingError:
    errors = run.node_errors()
    return TrainingError(failure_message(errors, outcome.get("error")),
                         retriable=retriable([text for _, text in errors.values()]))


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
                        run: RunDir) -> None:
    deadline = time.monotonic() + timeout
    while not server.done():
        if "error" in outcome or run.failed_nodes():
            raise _failure(run, outcome)
        if time.monotonic() > deadline:
            raise TrainingError(
                f"only {nodes - server.remaining()} of {nodes} TF nodes started within "
                f"train.reservation_timeout = {timeout:.0f} s (are {nodes} executors free, with one task slot each?)")
        time.sleep(POLL)


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


class LostWorkers:
    """Parameter-server training goes on when a worker is lost: the chief's coordinator gives
    the lost worker's steps to the others. A failed node task is a lost worker once its retry
    has marked it lost in the run directory (executor.node.guard); the retry may first wait for
    a free executor, for up to `train.reservation_timeout` seconds. Any other failure, or the
    loss of every worker, fails the attempt."""

    def __init__(self, tr: TrainConfig, run: RunDir, log: Callable[[str], None]):
        self.tr, self.run, self.log = tr, run, log
        self.reported: list[str] = []
        self.waiting_since: float | None = None

    def report(self) -> list[str]:
        """Logs each newly lost worker once; returns all lost so far."""
        names = self.run.lost_nodes()
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


def _abort(sc, group: str, run: RunDir, thread: threading.Thread) -> None:
    """Stop every node of the run: serving nodes see it done, the rest are cancelled."""
    try:
        run.mark_done("failed")
    except Exception:
        pass
    sc.cancelJobGroup(group)
    thread.join(60)


def startup(run: RunDir) -> dict[str, float]:
    """Seconds from starting the reservation server (executors already there) to every node
    reserved, and to the chief's first finished step."""
    launched = run.time_of(LAUNCHED)
    if launched is None:
        return {}
    out = {}
    for step, key in ((RESERVED, "to_reserved_seconds"), (FIRST_STEP, "to_first_step_seconds")):
        at = run.time_of(step)
        if at is not None:
            out[key] = round(at - launched, 3)
    return out
