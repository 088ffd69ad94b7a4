"""The launcher that starts an attempt's TF nodes on the executors: one DataFrame job, one task
per node, in a classic session and a Spark Connect client alike.

The job reads the nodes' input files with the package's `tfos-node-inputs` data source (partition
i: node i's files, `cluster.driver.node_inputs`) and hands each partition to `mapInArrow`, whose
task puts the files on its local disk and runs the node in a process of its own (`cluster.node.task`);
TensorFlowOnSpark's node runtime forms the TF cluster there, through the run's control channel:
  * it waits for enough executors first, and fails with a clear message after
    `reservation_timeout` seconds if the cluster is too small;
  * the nodes report to the control server: this process's own where executors can reach it
    (a classic session), or the driver's relay to it (a Spark Connect client, `relay`);
  * the job carries a tag, by which it is cancelled when the attempt fails (under
    multi_worker_mirrored, when the run ends: a failed attempt's job runs the next one,
    `cluster.driver.generations`), and by which the driver tells which of its tasks failed (a
    node that could not report still has the error Spark recorded for its task);
  * the chief (or, on failure, the driver) ends the run, on which parameter servers and PS
    workers return, so no task outlives the run.

The job is not a barrier stage: a barrier stage relaunches every task when one fails, where here Spark runs only the
lost node's task again (it joins the next attempt, the others' tasks stay), and a parameter-server run goes on when a
worker's executor is lost (`supervise.LostWorkers`); the nodes meet through the control channel instead (TFoS's
reservations), which also says which nodes have started.
"""
from __future__ import annotations

import functools
import re
import threading
import time
from typing import Any, Callable

from tfos_jobs import control_channel as cc
from tfos_jobs import driver_calls, sessions
from tfos_jobs.cluster.driver import node_inputs
from tfos_jobs.cluster.driver.control_server import ControlServer, Endpoint, control_address
from tfos_jobs.cluster.driver.failure_policy import task_traceback
from tfos_jobs.cluster.driver.generations import Generations
from tfos_jobs.cluster.driver.launcher import Attempt, Watch
from tfos_jobs.cluster.driver.relay import RelayedControlServer
from tfos_jobs.cluster.driver.run_state import LAUNCHED, RunState
from tfos_jobs.cluster.driver.supervise import POLL, supervise
from tfos_jobs.config import TrainConfig, parse_ports
from tfos_jobs.contracts.node_args import Launch
from tfos_jobs.contracts.metrics import SHRINK
from tfos_jobs.errors import ConfigError, Resize, TrainingError
from tfos_jobs.topology import Strategy, node_name, roles

IN_DRIVER = re.compile(r"local(\[[^\]]*\])?")  # masters whose tasks run in the driver's JVM (not local-cluster)


class ClusterLauncher:
    """One attempt = one tagged Spark job of one task per TF node (one node under `local`: a
    sweep's single-process trial); under multi_worker_mirrored a failed attempt's job is kept
    for the next one (`cluster.driver.generations`) until `close`. `pruning`: a lone node asks
    the attempt's state after each epoch whether to go on (`RunState.judge`)."""

    def __init__(self, spark: Any, *, pruning: bool = False):
        self.spark, self.pruning = spark, pruning
        self._live: _LiveJob | None = None

    def check(self, train: TrainConfig, log: Callable[[str], None]) -> None:
        """Before the run: settings that cannot work on this cluster fail here, naming them."""
        if train.strategy == Strategy.LOCAL:
            return
        conf = sessions.driver_conf(self.spark)
        check_fixed_executors(conf)
        master = sessions.master(self.spark)
        if IN_DRIVER.fullmatch(master):
            raise TrainingError(
                f"strategy {train.strategy!r} needs {train.nodes()} Spark executors, but master {master!r} runs everything in "
                "the driver; use local-cluster[N,1,MB], a real cluster, or train.strategy = \"local\"")
        advice = container_memory_advice(conf)
        if advice:
            log(f"warning: {advice}")

    def run(self, attempt: Attempt, watch: Watch) -> None:
        live = self._live
        if live is not None and live.job.running():
            live.begin(attempt)
        else:
            self.close()
            live = self._live = self._start(attempt, watch)
        state = attempt.state

        def keep(e: BaseException) -> bool:
            """A failed attempt whose nodes all started leaves its job to the next one."""
            return (isinstance(e, TrainingError) and not isinstance(e, Resize) and e.retriable and live.launch.rejoins
                    and state.reserved() and live.job.running())

        try:
            supervise(live.job, attempt, watch, keep=keep)
        except BaseException as e:
            if not keep(e):
                self.close()
            raise
        self.close()

    def close(self) -> None:
        """End the node job an attempt left running, and the control channel with it."""
        live, self._live = self._live, None
        if live is not None:
            live.close()

    def _start(self, attempt: Attempt, watch: Watch) -> "_LiveJob":
        spark, train, state = self.spark, attempt.train, attempt.state
        nodes = train.nodes()
        if train.strategy != Strategy.LOCAL:
            _wait_for_executors(spark, nodes, train)
        state.mark(LAUNCHED)
        secret = cc.new_secret()  # this run's; reaches the nodes only inside the task's function
        node_roles = roles(train.strategy, nodes, attempt.args.num_ps)
        names = [node_name(role, index) for role, index in node_roles]
        plans = node_inputs.plan(attempt.meta, node_roles, train.strategy, train.score_test)
        relayed = sessions.is_connect(spark)
        generations: Generations | None = None

        def handle(kind: str, message: dict[str, Any]) -> Any:
            assert generations is not None  # set before the nodes start
            return generations.handle(kind, message)

        endpoint = self._endpoint(secret, handle, train, watch)
        address = endpoint.start()
        try:
            launch = Launch(run_id=state.id, strategy=train.strategy, nodes=nodes, num_ps=attempt.args.num_ps,
                            server=address, relayed=relayed, tf_ports=parse_ports(train.tf_ports), local_dir=train.local_dir,
                            inputs=plans, args=attempt.args, pruning=self.pruning, job_id=state.id)
            generations = Generations(launch, state, names)
            job = NodeTasks(spark, f"tfos-train-{state.id}", names, generations)
            job.start(lambda: _node_job(spark, attempt, plans, launch, secret),
                      f"tfos train: {nodes} TF node{'s' if nodes > 1 else ''}")
        except BaseException:
            endpoint.stop()
            raise
        return _LiveJob(job, endpoint, generations, watch)

    def _endpoint(self, secret: bytes, handle: Callable[[str, dict[str, Any]], Any], train: TrainConfig,
                  watch: Watch) -> Endpoint:
        """This process's own server where the executors reach it; a Connect client's through the relay."""
        if sessions.is_connect(self.spark):
            return RelayedControlServer(self.spark, secret, handle, ports=parse_ports(train.control_ports), log=watch.log)
        conf = self.spark.sparkContext.getConf()
        bind, advertise = control_address(conf, train.control_bind)
        return ControlServer(secret, handle, bind=bind, advertise=advertise, ports=parse_ports(train.control_ports),
                             log=watch.log)


class _LiveJob:
    """A node job and its control channel, across the attempts it runs."""

    def __init__(self, job: "NodeTasks", endpoint: Endpoint, generations: Generations, watch: Watch):
        self.job, self.endpoint, self.generations, self.watch = job, endpoint, generations, watch

    @property
    def launch(self) -> Launch:
        return self.generations.launch

    def begin(self, attempt: Attempt) -> None:
        """The next attempt, on the same tasks."""
        attempt.state.mark(LAUNCHED)
        self.generations.begin(self.launch.next_attempt(attempt.state.id), attempt.state)

    def close(self) -> None:
        if self.job.running():
            self.job.cancel()
        self.endpoint.stop()
        rejected = self.endpoint.rejected
        if rejected:
            self.watch.log(f"control channel: rejected {sum(rejected.values())} message(s) from "
                           f"{', '.join(sorted(rejected))} during this run")
        self.watch.rejected.update(rejected)


def node_function(launch: Launch, secret: bytes) -> Callable[[Any], Any]:
    """What each node's task runs (`mapInArrow`'s function): plain values, the secret inside."""
    from tfos_jobs.cluster.node.task import run_node

    return functools.partial(run_node, launch, secret)


def _node_job(spark: Any, attempt: Attempt, plans: list[dict[str, str]], launch: Launch, secret: bytes) -> Any:
    from tfos_jobs.cluster.node.task import RESULT_SCHEMA

    inputs = node_inputs.frame(spark, attempt.meta, plans, delivery=attempt.train.node_inputs)
    return inputs.mapInArrow(node_function(launch, secret), RESULT_SCHEMA)


class NodeTasks:
    """The nodes' Spark job, collected on a driver thread under its tag; `supervise` watches it.
    When its tasks run several attempts (`generations`), a failed task attempt counts only
    against the attempt it ran, and a cancel first tells the tasks that no attempt follows."""

    def __init__(self, spark: Any, tag: str, node_names: list[str], generations: Generations):
        self.spark, self.tag, self.node_names, self.generations = spark, tag, node_names, generations
        self.outcome: dict[str, Any] = {}
        self.thread = threading.Thread(target=lambda: None)

    def start(self, make_job: Callable[[], Any], description: str) -> None:
        def collect() -> None:
            try:
                with sessions.tagged(self.spark, self.tag):
                    if not sessions.is_connect(self.spark):
                        self.spark.sparkContext.setJobDescription(description)
                    self.outcome["rows"] = make_job().collect()
            except Exception as e:  # reported by the supervisor
                self.outcome["error"] = e

        self.thread = threading.Thread(target=collect, name="tfos-nodes", daemon=True)
        self.thread.start()

    def running(self) -> bool:
        return self.thread.is_alive()

    def wait(self, seconds: float) -> None:
        self.thread.join(seconds)

    def error(self) -> BaseException | None:
        return self.outcome.get("error")

    def _failures(self) -> dict[str, Any]:
        try:
            return driver_calls.call(self.spark, driver_calls.JOB_FAILURES, tag=self.tag)
        except Exception:  # the session is closing: nothing more to learn
            return {"failed_tasks": 0, "errors": {}, "attempts": []}

    def _failed(self, failures: dict[str, Any]) -> list[tuple[int, str]]:
        """(partition, error) of each failed task attempt that concerns the current attempt."""
        if not self.generations.launch.rejoins:
            return [(int(p), str(message)) for p, message in failures["errors"].items()]
        return [(int(p), str(message)) for p, attempt, message in failures["attempts"]
                if self.generations.counts(int(p), int(attempt))]

    def failed_tasks(self) -> int:
        failures = self._failures()
        return len(self._failed(failures)) if self.generations.launch.rejoins else int(failures["failed_tasks"])

    def record_task_errors(self, state: RunState) -> None:
        """A node that could not report its own failure (it could not reach or was refused by the
        control server, or its executor died) still has the error Spark recorded for its task."""
        for partition, message in self._failed(self._failures()):
            if partition < len(self.node_names):
                state.task_failed(self.node_names[partition], task_traceback(message))

    def executors(self) -> int:
        return sessions.executors(self.spark)

    def cancel(self) -> None:
        self.generations.end()  # tasks waiting for an attempt end on their own, at once
        try:
            sessions.interrupt(self.spark, self.tag)
        except Exception:  # a session that is gone has nothing running
            pass
        self.thread.join(60)


def check_fixed_executors(conf: Any) -> None:
    """A TF cluster holds one executor per node for the whole run; dynamic allocation would
    take idle executors away before the nodes start, or leave too few to start them."""
    if (conf.get("spark.dynamicAllocation.enabled", "false") or "").strip().lower() == "true":
        raise ConfigError(
            "spark.dynamicAllocation.enabled = true: a TF cluster needs a fixed set of executors, one per node "
            "for the whole run; submit training with --conf spark.dynamicAllocation.enabled=false and "
            "--num-executors (or spark.executor.instances) of at least the number of TF nodes")


# What a TF node's Python process takes beside the executor's JVM (TensorFlow, the model, a
# worker's in-memory shard): roughly, for the models the package builds on the demo's scale.
TF_NODE_MB = 1536


def container_memory_advice(conf: Any) -> str | None:
    """On YARN a container is killed when its processes outgrow executor memory + overhead; the
    TF node runs in a process of its own, outside the JVM heap, so only the overhead (default:
    10% of the executor memory, at least 384 MB) and spark.executor.pyspark.memory cover it."""
    if not (conf.get("spark.master", "") or "").startswith("yarn"):
        return None
    heap = _mb(conf.get("spark.executor.memory", "1g") or "1g")
    overhead = _mb(conf.get("spark.executor.memoryOverhead", "") or "") or max(384, heap // 10)
    python = _mb(conf.get("spark.executor.pyspark.memory", "") or "")
    if overhead + python >= TF_NODE_MB:
        return None
    return (f"each YARN container holds the executor's {heap} MB heap and {overhead + python} MB beside it "
            f"(spark.executor.memoryOverhead{' + spark.executor.pyspark.memory' if python else ''}), where the "
            f"TF node's Python process must fit; where YARN enforces memory limits, submit with --conf "
            f"spark.executor.memoryOverhead=2g or more (the node's peak memory is in the executor logs)")


def _mb(size: str) -> int:
    """A Spark memory setting in MiB ("2g", "1536m", "512"; a bare number is MiB)."""
    size = size.strip().lower()
    if not size:
        return 0
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    number, unit = (size[:-2], size[-2]) if size.endswith("b") and size[-2:-1] in units else (
        (size[:-1], size[-1]) if size[-1] in units else (size, "m"))
    return int(float(number) * units[unit])


def _wait_for_executors(spark: Any, nodes: int, train: TrainConfig) -> None:
    """A TF node needs an executor of its own; fail clearly rather than hang when there are too few.
    Elastic training starts with fewer after `elastic.wait_seconds` (`Resize`)."""
    started = time.monotonic()
    deadline = started + train.reservation_timeout
    while True:
        have = sessions.executors(spark)
        if have >= nodes:
            return
        if train.elastic.on and time.monotonic() - started >= train.elastic.wait_seconds and train.elastic.min_workers <= have:
            raise Resize(f"the TF cluster needs {nodes} executors, but {have} {'are' if have > 1 else 'is'} registered "
                         f"after train.elastic.wait_seconds = {train.elastic.wait_seconds} s: the run starts with fewer "
                         "workers", workers=have, cause=SHRINK)
        if time.monotonic() > deadline:
            raise TrainingError(
                f"the TF cluster needs {nodes} executors ({_layout(train)}), but only {have} registered within "
                f"train.reservation_timeout = {train.reservation_timeout} s")
        time.sleep(POLL)


def _layout(train: TrainConfig) -> str:
    if train.strategy == Strategy.PARAMETER_SERVER:
        return f"1 chief + {train.workers} workers + {train.ps} ps"
    return f"{train.workers} workers, one of them the chief"
