"""A TF node, in its own process on an executor (`cluster.node.process`).

Under a TF strategy, TensorFlowOnSpark's node runtime (`TFSparkNode.run`) reserves the node's place through the control
channel, sets TF_CONFIG from the cluster it learns, and calls `main_fun(args, ctx)`, which takes the node's role from
`topology.assign_role`; under `local` the node trains alone (`train_alone`: a sweep's single-process trial). Either way
it reports to the driver over the control channel only (`cluster.node.control_client.DriverLink`), and trains from the
files its task wrote to the workspace.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from typing import Iterator, Mapping, cast

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.metrics import NodeRecord
from tfos_jobs.contracts.node_args import Launch, NodeArgs
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node import lifecycle, spark_executor
from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.tf_import import tensorflow
from tfos_jobs.topology import Role, Strategy, assign_role, training_workers, worker_rank


@dataclass(frozen=True)
class Node:
    """What the node's process knows of itself beside its launch: its line to the driver, its
    workspace and its partition of the node job."""

    link: DriverLink
    workspace: Workspace
    partition: int
    ports: tuple[int, ...] = ()  # its share of train.tf_ports (TF server, gradient mesh); empty: any free port

    def record(self, *, role: str, index: int, manager_pid: int | None,
               cluster: dict[str, list[str]], threads: int) -> NodeRecord:
        """What the node tells the driver of itself when it starts (kept in the model directory)."""
        return NodeRecord(partition=self.partition, host=socket.gethostname(), pid=os.getpid(), python=sys.executable,
                          cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""), started=time.time(),
                          role=role, index=index, executor_id=spark_executor.executor_id(), manager_pid=manager_pid,
                          cluster=cluster, threads=threads)


_current: contextvars.ContextVar[Node] = contextvars.ContextVar("tfos_node")


@contextlib.contextmanager
def running(node: Node) -> Iterator[None]:
    """`main_fun`, called by TFoS within this block, finds `node` (TFoS hands it only `args`)."""
    token = _current.set(node)
    try:
        yield
    finally:
        _current.reset(token)


def run_in_cluster(launch: Launch, node: Node, secret: bytes) -> None:
    """TensorFlowOnSpark's node runtime, reserving through the authenticated channel."""
    tensorflow(devices=False)  # TensorFlowOnSpark imports it: quietly, before it does
    from tensorflowonspark import TFSparkNode

    from tfos_jobs.cluster.node.control_client import authenticated

    nodes = launch.nodes
    template = {Role.CHIEF.value: [0]} | ({Role.WORKER.value: list(range(1, nodes))} if nodes > 1 else {})
    cluster_meta = {
        "id": secrets.randbits(64), "cluster_template": template, "num_executors": nodes,
        "default_fs": "file://", "working_dir": ".", "server_addr": launch.server, "release_port": True,
    }
    node_fn = TFSparkNode.run(main_fun, launch.args.to_dict(), cluster_meta, False, None, ["error"], False)
    with running(node), authenticated(secret, launch.relayed, launch.run_id):
        node_fn(iter([node.partition]))


def main_fun(node_args: Mapping[str, object], ctx) -> None:
    """`node_args`: `NodeArgs.to_dict()` (TFoS hands them on as given)."""
    tensorflow(devices=False)  # quiet; its devices once CUDA_VISIBLE_DEVICES is settled below
    from tfos_jobs.cluster.node.training import configure_threads

    node = _current.get()
    args = NodeArgs.from_dict(node_args)
    threads = configure_threads(args.train.threads)  # before TensorFlow starts its pools
    strategy = args.train.strategy
    role, index, cluster = assign_role(strategy, args.num_ps, ctx.job_name, ctx.task_index, ctx.cluster_spec)
    if role == Role.PS:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # parameter servers hold variables, never compute on a GPU
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
    tensorflow()  # the devices, now that CUDA_VISIBLE_DEVICES is settled
    manager_pid = _manager_pid()
    if manager_pid:
        lifecycle.start_reaper(os.getpid(), [manager_pid])
    node.link.started(node.record(role=role, index=index, manager_pid=manager_pid, cluster=cluster, threads=threads))
    status = cc.RUN_FAILED
    try:
        if strategy == Strategy.PARAMETER_SERVER and role in (Role.PS, Role.WORKER):
            serve(cluster, role, index, node.link, args.max_node_seconds)
        else:
            from tfos_jobs.cluster.node import training

            with training.temp_files_in(node.workspace.scratch):
                training.fit_and_export(args, role=role, worker_index=worker_rank(role, index),
                                        num_workers=training_workers(cluster),
                                        link=node.link, workspace=node.workspace, ports=node.ports)
        status = cc.RUN_OK
    finally:
        if role == Role.CHIEF:
            node.link.done(status)
        _stop_manager()


def train_alone(launch: Launch, node: Node) -> None:
    """The `local` strategy on an executor: one process, no TF cluster. With `launch.pruning`
    it asks the driver after each epoch whether to go on, and ends without an export when told
    to stop (its run's end status says so: RUN_PRUNED)."""
    tensorflow(devices=False)
    from tfos_jobs.cluster.node import training

    args = launch.args
    threads = training.configure_threads(args.train.threads)
    _use_task_gpus()
    tensorflow()
    node.link.started(node.record(role=Role.CHIEF.value, index=0, manager_pid=None, cluster={}, threads=threads))
    pruner = training.pruning(node.link) if launch.pruning else None
    status = cc.RUN_FAILED
    try:
        with training.temp_files_in(node.workspace.scratch):
            training.fit_and_export(args, role=Role.CHIEF, worker_index=0, num_workers=1, link=node.link,
                                    workspace=node.workspace, extra_callbacks=(pruner,) if pruner else ())
        status = cc.RUN_PRUNED if pruner is not None and pruner.skip_export else cc.RUN_OK
    finally:
        node.link.done(status)


def take_place(launch: Launch, node: Node, place: Mapping[str, object]) -> None:
    """A lost parameter-server worker's place, taken by its task's retry: the same task of the same TF cluster at the
    same address (`place`, as the lost worker reported it), where the chief's coordinator finds it again and rebuilds
    its dataset. No reservation: the cluster formed long ago."""
    tensorflow(devices=False)
    from tfos_jobs.cluster.node.training import configure_threads

    cluster = cast(dict[str, list[str]], place["cluster"])
    role, index = str(place["role"]), int(cast(int, place["index"]))
    threads = configure_threads(launch.args.train.threads)
    _use_task_gpus()
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
    tensorflow()
    node.link.started(node.record(role=role, index=index, manager_pid=None, cluster=cluster, threads=threads))
    serve(cluster, role, index, node.link, launch.args.max_node_seconds)


def port_share(ports: list[int], node: int, nodes: int) -> list[int]:
    """The ports node `node` of `nodes` may take: every `nodes`-th port from its own offset. A free port is only free
    until TF binds it, moments later; two nodes on one host that drew from the same ports could both find one free and
    the second TF server would fail to start. Disjoint shares make that impossible within a run."""
    return ports[node::nodes]


def free_port(ports: list[int]) -> int:
    """A port of `ports` nothing listens on now (TF binds it moments later)."""
    import random

    # Not the module's generator: training seeds it, and a reused Python worker would then
    # draw the same ports for every run.
    for port in random.SystemRandom().sample(ports, len(ports)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", port))
                return port
            except OSError:
                continue
    shown = ", ".join(map(str, ports[:5])) + (", ..." if len(ports) > 5 else "")
    raise RuntimeError(f"no free port for the TF server among this node's share of train.tf_ports ({shown})")


def serve(cluster: dict[str, list[str]], role: str, index: int, link: DriverLink, max_seconds: float) -> None:
    """A parameter server or PS-mode worker: serve the chief until the run is done."""
    import tensorflow as tf

    tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=role, task_index=index, protocol="grpc", start=True)
    status = lifecycle.wait_until_done(link, max_seconds)
    if status == lifecycle.TIMEOUT:
        raise TimeoutError(f"{role} {index}: the chief did not finish within {max_seconds:.0f} s")


def _use_task_gpus() -> None:
    """The process sees the GPUs Spark assigned the node's task (when it was assigned none, what it saw already)."""
    from pyspark import TaskContext

    task = TaskContext.get()
    resources = task.resources() if task is not None else {}
    if "gpu" in resources:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(resources["gpu"].addresses)


def _manager_pid() -> int | None:
    from tensorflowonspark.TFSparkNode import TFSparkNode

    process = getattr(TFSparkNode.mgr, "_process", None)
    return process.pid if process is not None else None


def _stop_manager() -> None:
    """End TFoS's per-node manager process now: Spark reuses this Python worker, and the
    manager would otherwise live on with it."""
    from tensorflowonspark.TFSparkNode import TFSparkNode

    if TFSparkNode.mgr is not None:
        try:
            TFSparkNode.mgr.shutdown()
        finally:
            TFSparkNode.mgr = None
