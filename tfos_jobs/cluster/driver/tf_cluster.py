"""The launcher that starts an attempt's TF nodes on the executors with TensorFlowOnSpark.

TFoS's `TFCluster.run/shutdown` stop the SparkContext and `sys.exit` on any error and wait
for tasks in fixed 5-second polls, so this uses TFoS's node runtime (`TFSparkNode.run`) with
its own control server (authenticated, `cluster.driver.control_server`) and supervision
(`cluster.driver.supervise`):
  * it waits for enough executors first, and fails with a clear message after
    `reservation_timeout` seconds if the cluster is too small;
  * each node's task gets the node's dataset files through Spark (`cluster.driver.node_inputs`), so
    the dataset may live on any filesystem Spark reads; the nodes report over the network;
  * the node job runs in a job group, which is cancelled when the attempt fails; a node that
    could not report its error still has the one Spark recorded for its task;
  * the chief (or, on failure, the driver) ends the run, on which parameter servers and PS
    workers return, so no task outlives the run.
"""
from __future__ import annotations

import contextlib
import secrets
import threading
import time
from typing import Any, Iterator

from pyspark import InheritableThread, SparkContext

from tfos_jobs import control_channel
from tfos_jobs.cluster.driver import node_inputs
from tfos_jobs.cluster.driver.control_server import ControlServer, control_address
from tfos_jobs.cluster.driver.failure_policy import task_traceback
from tfos_jobs.cluster.driver.launcher import Attempt, Watch
from tfos_jobs.cluster.driver.run_state import LAUNCHED, RunState
from tfos_jobs.cluster.driver.supervise import POLL, supervise
from tfos_jobs.config import TrainConfig, parse_ports
from tfos_jobs.contracts.node_args import Launch
from tfos_jobs.errors import TrainingError
from tfos_jobs.tf_import import tensorflow
from tfos_jobs.topology import Role, Strategy


class TFoSLauncher:
    """One attempt = one Spark job of one task per TF node, in a job group of its own."""

    def __init__(self, sc: SparkContext):
        self.sc = sc

    def run(self, attempt: Attempt, watch: Watch) -> None:
        tensorflow(devices=False)  # TensorFlowOnSpark imports it: quietly, before it does
        from tensorflowonspark import TFSparkNode

        from tfos_jobs.cluster.node.node import guard, main_fun, node_name, roles

        sc, tr, args, state = self.sc, attempt.tr, attempt.args, attempt.state
        nodes = tr.nodes()
        _wait_for_executors(sc, nodes, tr)
        state.mark(LAUNCHED)
        secret = control_channel.new_secret()  # this run's; reaches the nodes only inside the task closure
        bind, advertise = control_address(sc.getConf(), tr.control_bind)
        server = ControlServer(secret, state.handle, bind=bind, advertise=advertise,
                               ports=parse_ports(tr.control_ports), log=watch.log)
        address = server.start()
        try:
            node_roles = roles(tr.strategy, nodes, args.num_ps)
            plans = node_inputs.plan(attempt.meta, node_roles, tr.strategy, tr.score_test)
            launch = Launch(run_id=state.id, strategy=tr.strategy, nodes=nodes, num_ps=args.num_ps, server=address,
                            tf_ports=parse_ports(tr.tf_ports), local_dir=tr.local_dir, inputs=plans)
            template = {Role.CHIEF.value: [0]} | ({Role.WORKER.value: list(range(1, nodes))} if nodes > 1 else {})
            cluster_meta = {
                "id": secrets.randbits(64), "cluster_template": template, "num_executors": nodes,
                "default_fs": "file://", "working_dir": ".", "server_addr": address, "release_port": True,
            }
            node_fn = guard(TFSparkNode.run(main_fun, args.to_dict(), cluster_meta, False, None, ["error"], False),
                            launch, secret)
            job = SparkNodes(sc, f"tfos-train-{state.id}", [node_name(role, index) for role, index in node_roles])
            job.start(lambda: node_inputs.rdd(sc, attempt.meta, plans).mapPartitionsWithIndex(node_fn), state.id,
                      f"tfos train: {nodes} TF nodes")
            supervise(job, attempt, watch)
        finally:
            server.stop()
            if server.rejected:
                watch.log(f"control channel: rejected {sum(server.rejected.values())} message(s) from "
                          f"{', '.join(sorted(server.rejected))} during this run")
            watch.rejected.update(server.rejected)


class SparkNodes:
    """The nodes' Spark job, collected on a driver thread; `supervise` watches it."""

    def __init__(self, sc: SparkContext, group: str, node_names: list[str]):
        self.sc, self.group, self.node_names = sc, group, node_names
        self.outcome: dict[str, Any] = {}
        self.thread = InheritableThread(target=lambda: None)

    def start(self, make_rdd: Any, run_id: str, description: str) -> None:
        def collect() -> None:
            self.sc.setJobGroup(self.group, description, interruptOnCancel=True)
            try:
                node_rdd = make_rdd()
                with _own_python_workers(self.sc, run_id):
                    node_rdd._jrdd  # the Python function is wrapped here, with this run's environment
                node_rdd.collect()
                self.outcome["ok"] = True
            except Exception as e:  # reported by the supervisor
                self.outcome["error"] = e

        self.thread = InheritableThread(target=collect, name="tfos-nodes")
        self.thread.daemon = True
        self.thread.start()

    def running(self) -> bool:
        return self.thread.is_alive()

    def wait(self, seconds: float) -> None:
        self.thread.join(seconds)

    def error(self) -> BaseException | None:
        return self.outcome.get("error")

    def failed_tasks(self) -> int:
        tracker = self.sc.statusTracker()
        count = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else []:
                stage = tracker.getStageInfo(stage_id)
                count += stage.numFailedTasks if stage else 0
        return count

    def record_task_errors(self, state: RunState) -> None:
        """A node that could not report its own failure (it could not reach or was refused by the
        control server, or its executor died) still has the error Spark recorded for its task."""
        tracker, store = self.sc.statusTracker(), self.sc._jsc.sc().statusStore()
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else []:
                stage = tracker.getStageInfo(stage_id)
                for attempt in range(stage.currentAttemptId + 1 if stage else 0):
                    tasks = store.taskList(stage_id, attempt, 10_000)
                    for i in range(tasks.size()):
                        task = tasks.apply(i)
                        message = task.errorMessage()
                        if message.isDefined() and task.index() < len(self.node_names):
                            state.task_failed(self.node_names[task.index()], task_traceback(str(message.get())))

    def cancel(self) -> None:
        self.sc.cancelJobGroup(self.group)
        self.thread.join(60)


_ENVIRONMENT_LOCK = threading.Lock()


@contextlib.contextmanager
def _own_python_workers(sc: SparkContext, run_id: str) -> Iterator[None]:
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


def _wait_for_executors(sc: SparkContext, nodes: int, tr: TrainConfig) -> None:
    """TFoS needs one executor per TF node; fail clearly rather than hang when there are too few."""
    master = sc.master
    if master is None:  # a running SparkContext always has one
        raise TrainingError("the SparkContext has no master")
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
