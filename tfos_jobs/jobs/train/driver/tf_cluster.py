"""Start a TF cluster on the executors with TensorFlowOnSpark, supervise it to its end.

TFoS's `TFCluster.run/shutdown` stop the SparkContext and `sys.exit` on any error and wait
for tasks in fixed 5-second polls, so this uses TFoS's node runtime (`TFSparkNode.run`) with
its own control server (authenticated, `jobs.train.driver.control_server`) and supervision:
  * it waits for enough executors first, and fails with a clear message after
    `reservation_timeout` seconds if the cluster is too small;
  * each node's task gets the node's dataset files through Spark (`jobs.train.driver.node_inputs`), so
    the dataset may live on any filesystem Spark reads; the nodes report over the network;
  * the node job runs in a job group; when any node fails, the group is cancelled at once
    (a retried TF node could never rejoin its cluster) and the node's own traceback is reported;
  * the chief (or, on failure, the driver) ends the run, on which parameter servers and PS
    workers return, so no task outlives the run.
Training (`jobs.train.driver.job`) and sweeps with TF-cluster trials both come through `run_cluster`.
"""
from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections import Counter
from typing import Any, Callable

from pyspark import InheritableThread

from tfos_jobs import control_channel
from tfos_jobs.config import TrainConfig, parse_ports
from tfos_jobs.contracts.node_args import Launch, NodeArgs
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.jobs.train.driver import node_inputs
from tfos_jobs.jobs.train.driver.control_server import ControlServer
from tfos_jobs.jobs.train.driver.failure_policy import failure_message, retriable, task_traceback
from tfos_jobs.jobs.train.driver.run_state import LAUNCHED, RESERVED, RunState
from tfos_jobs.errors import TrainingError
from tfos_jobs.tf_import import tensorflow
from tfos_jobs.topology import Role, Strategy

POLL = 0.5
# Where the tracebacks of a failed attempt's nodes are kept: node -> (its file, the traceback).
KeepErrors = Callable[[RunState], "dict[str, tuple[str, str]]"]


def run_cluster(sc, tr: TrainConfig, args: NodeArgs, meta: DatasetMeta, state: RunState, keep_errors: KeepErrors,
                log: Callable[[str], None], poll: Callable[[], None], rejected: Counter,
                stop: threading.Event | None = None) -> None:
    """Train one attempt on a TF cluster; returns when the chief has finished.

    `poll` is called while nodes run (progress lines); `rejected` counts, per peer address,
    control messages the control server refused; setting `stop` ends the attempt early
    with `TrainingError`. Raises `TrainingError` (retriable or not) on any failure, after
    every node of the attempt has stopped."""
    tensorflow(devices=False)  # TensorFlowOnSpark imports it: quietly, before it does
    from tensorflowonspark import TFSparkNode

    from tfos_jobs.jobs.train.executor.node import guard, main_fun, node_name, roles

    nodes = tr.nodes()
    _wait_for_executors(sc, nodes, tr)
    state.mark(LAUNCHED)
    secret = control_channel.new_secret()  # this run's; reaches the nodes only inside the task closure
    bind, advertise = control_address(sc.getConf(), tr.control_bind)
    server = ControlServer(secret, state.handle, bind=bind, advertise=advertise, ports=parse_ports(tr.control_ports),
                           log=log)
    address = server.start()
    node_roles = roles(tr.strategy, nodes, args.num_ps)
    node_names = [node_name(role, index) for role, index in node_roles]
    plans = node_inputs.plan(meta, node_roles, tr.strategy, tr.score_test)
    launch = Launch(run_id=state.id, strategy=tr.strategy, nodes=nodes, num_ps=args.num_ps, server=address,
                    tf_ports=parse_ports(tr.tf_ports), local_dir=tr.local_dir, inputs=plans)
    template = {Role.CHIEF.value: [0]} | ({Role.WORKER.value: list(range(1, nodes))} if nodes > 1 else {})
    cluster_meta = {
        "id": secrets.randbits(64), "cluster_template": template, "num_executors": nodes,
        "default_fs": "file://", "working_dir": ".", "server_addr": address, "release_port": True,
    }
    group = f"tfos-train-{state.id}"
    outcome: dict[str, Any] = {}

    def start_nodes():
        sc.setJobGroup(group, f"tfos train: {nodes} TF nodes", interruptOnCancel=True)
        try:
            node_fn = guard(TFSparkNode.run(main_fun, args.to_dict(), cluster_meta, False, None, ["error"], False),
                            launch, secret)
            node_rdd = node_inputs.rdd(sc, meta, plans).mapPartitionsWithIndex(node_fn)
            with _own_python_workers(sc, state.id):
                node_rdd._jrdd  # the Python function is wrapped here, with this run's environment
            node_rdd.collect()
            outcome["ok"] = True
        except Exception as e:  # reported by the supervising loop
            outcome["error"] = e

    thread = InheritableThread(target=start_nodes, name="tfos-nodes")
    thread.daemon = True
    thread.start()
    try:
        _await_reservations(sc, group, state, outcome, tr.reservation_timeout, node_names, keep_errors)
        state.mark(RESERVED)
        running_since = time.time()
        lost = LostWorkers(tr, state, log)
        while thread.is_alive():
            poll()
            if stop is not None and stop.is_set():
                raise TrainingError("stopped before the end (the run's backup is kept: running it again resumes)")
            failed = state.errors()
            task_failures = _failed_tasks(sc, group)
            if not failed and lost.tolerated(task_failures):
                thread.join(POLL)
                continue
            if failed or task_failures:
                time.sleep(2 * POLL)  # let the other nodes' errors land too: the first one is often a symptom
                _record_task_errors(sc, group, state, node_names)
                raise _failure(state, outcome, keep_errors)
            idle = time.time() - max(running_since, state.last_beat())
            if idle > tr.step_timeout:
                raise TrainingError(f"no training step finished in the last {idle:.0f} s "
                                    f"(train.step_timeout = {tr.step_timeout} s): a TF node hangs", retriable=True)
            thread.join(POLL)
        lost.report()  # a lost worker's retry may report it just before the run ends
        if "error" in outcome or state.errors():  # nodes that reported their error end their tasks well
            _record_task_errors(sc, group, state, node_names)
            raise _failure(state, outcome, keep_errors)
    except BaseException:
        _abort(sc, group, state, thread)
        raise
    finally:
        server.stop()
        if server.rejected:
            log(f"control channel: rejected {sum(server.rejected.values())} message(s) from "
                f"{', '.join(sorted(server.rejected))} during this run")
        rejected.update(server.rejected)


def _failure(state: RunState, outcome: dict[str, Any], keep_errors: KeepErrors) -> TrainingError:
    errors = keep_errors(state)
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
    if tr.strategy == Strategy.PARAMETER_SERVER:
        return f"1 chief + {tr.workers} workers + {tr.ps} ps"
    return f"{tr.workers} workers, one of them the chief"


def control_address(conf, configured: str) -> tuple[str, str]:
    """(address the reservation server binds to, address the nodes connect to): the configured
    one, else Spark's driver bind address, else the driver host Spark advertises. A wildcard
    bind is advertised as the driver host."""
    host = conf.get("spark.driver.host", None) or socket.gethostbyname(socket.gethostname())
    bind = configured or conf.get("spark.driver.bindAddress", None) or host
    return bind, host if bind in ("0.0.0.0", "::", "") else bind


def _await_reservations(sc, group: str, state: RunState, outcome: dict[str, Any], timeout: float,
                        node_names: list[str], keep_errors: KeepErrors) -> None:
    deadline = time.monotonic() + timeout
    nodes = len(node_names)
    while not state.reserved():
        if "error" in outcome or state.errors() or _failed_tasks(sc, group):
            time.sleep(2 * POLL)
            _record_task_errors(sc, group, state, node_names)
            raise _failure(state, outcome, keep_errors)
        if time.monotonic() > deadline:
            raise TrainingError(
                f"only {nodes - state.remaining()} of {nodes} TF nodes started within "
                f"train.reservation_timeout = {timeout:.0f} s (are {nodes} executors free, with one task slot each?)")
        time.sleep(POLL)


def _record_task_errors(sc, group: str, state: RunState, node_names: list[str]) -> None:
    """A node that could not report its own failure (it could not reach or was refused by the
    control server, or its executor died) still has the error Spark recorded for its task."""
    tracker, store = sc.statusTracker(), sc._jsc.sc().statusStore()
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else []:
            stage = tracker.getStageInfo(stage_id)
            for attempt in range(stage.currentAttemptId + 1 if stage else 0):
                tasks = store.taskList(stage_id, attempt, 10_000)
                for i in range(tasks.size()):
                    task = tasks.apply(i)
                    message = task.errorMessage()
                    if message.isDefined() and task.index() < len(node_names):
                        state.task_failed(node_names[task.index()], task_traceback(str(message.get())))


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
    has reported it lost (jobs.train.executor.node.guard); the retry may first wait for a free executor,
    for up to `train.reservation_timeout` seconds. Any other failure, or the loss of every
    worker, fails the attempt."""

    def __init__(self, tr: TrainConfig, state: RunState, log: Callable[[str], None]):
        self.tr, self.state, self.log = tr, state, log
        self.reported: list[str] = []
        self.waiting_since: float | None = None

    def report(self) -> list[str]:
        """Logs each newly lost worker once; returns all lost so far."""
        names = self.state.lost()
        for name in names:
            if name not in self.reported:
                left = self.tr.workers - len(names)
                self.log(f"TF node {name} was lost with its executor; training goes on with {left} worker(s)")
                self.reported.append(name)
        return names

    def tolerated(self, task_failures: int) -> bool:
        if self.tr.strategy != Strategy.PARAMETER_SERVER or task_failures == 0:
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


def _abort(sc, group: str, state: RunState, thread: threading.Thread) -> None:
    """Stop every node of the run: serving nodes hear it ended, the rest are cancelled."""
    state.mark_done(control_channel.RUN_FAILED)
    sc.cancelJobGroup(group)
    thread.join(60)
