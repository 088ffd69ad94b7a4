"""The function TensorFlowOnSpark runs on every TF node (executor side).

TFoS starts one node per executor, labels them `chief` and `worker`, sets TF_CONFIG and
CUDA_VISIBLE_DEVICES (from the GPU addresses Spark assigned the task), and calls
`main_fun(args, ctx)`, which takes the node's role from `topology.assign_role`.

Before TFoS starts the node, `guard` writes the node's input files (handed over by Spark) to
the node's local workspace and fetches the run's resume state from the driver; the node then
reports to the driver over the control channel only (`cluster.node.control_client.DriverLink`).
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Iterator

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.node_args import Launch, NodeArgs
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node import lifecycle, local_disk
from tfos_jobs.tf_import import tensorflow
from tfos_jobs.topology import Role, Strategy, assign_role, node_name, roles, training_workers, worker_rank


@dataclass(frozen=True)
class Node:
    """What `guard` gives the node function it starts: its line to the driver and its workspace."""

    link: Any  # cluster.node.control_client.DriverLink
    workspace: Workspace


_current: contextvars.ContextVar[Node] = contextvars.ContextVar("tfos_node")


@contextlib.contextmanager
def running(node: Node) -> Iterator[None]:
    """`main_fun`, called by TFoS within this block, finds `node` (TFoS hands it only `args`)."""
    token = _current.set(node)
    try:
        yield
    finally:
        _current.reset(token)


def main_fun(node_args: dict[str, Any], ctx) -> None:
    """`node_args`: `NodeArgs.to_dict()` (TFoS hands them on as given)."""
    tensorflow(devices=False)  # quiet; its devices once CUDA_VISIBLE_DEVICES is settled below
    from tfos_jobs.cluster.node.training import configure_threads

    args = NodeArgs.from_dict(node_args)
    threads = configure_threads(args.threads)  # before TensorFlow starts its pools
    strategy = args.strategy
    role, index, cluster = assign_role(strategy, args.num_ps, ctx.job_name, ctx.task_index, ctx.cluster_spec)
    if role == Role.PS:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # parameter servers hold variables, never compute on a GPU
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
    tensorflow()  # the devices, now that CUDA_VISIBLE_DEVICES is settled
    node = _current.get()
    manager_pid = _manager_pid()
    if manager_pid:
        lifecycle.start_reaper(os.getpid(), [manager_pid], node.workspace)
    node.link.started({
        "role": role, "index": index, "executor_id": ctx.executor_id, "partition": _partition(), "pid": os.getpid(),
        "python": sys.executable, "manager_pid": manager_pid, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "cluster": cluster, "started": time.time(), "threads": threads,
    })
    status = cc.RUN_FAILED
    try:
        if strategy == Strategy.PARAMETER_SERVER and role in (Role.PS, Role.WORKER):
            serve(cluster, role, index, node.link, args.max_node_seconds)
        else:
            from tfos_jobs.cluster.node import training

            with training.temp_files_in(node.workspace.scratch):
                training.fit_and_export(args, role=role, worker_index=worker_rank(role, index),
                                        num_workers=training_workers(cluster),
                                        link=node.link, workspace=node.workspace)
        status = cc.RUN_OK
    finally:
        if role == Role.CHIEF:
            node.link.done(status)
        _stop_manager()


def guard(node_fn, launch: Launch, secret: bytes):
    """Wraps TFoS's node function for `mapPartitionsWithIndex` over the node job's inputs
    (`cluster.driver.node_inputs`); it yields nothing.

    The node connects to the driver's control server with this run's `secret` (it reaches the
    node only in this closure), writes its input files to its local workspace, fetches the
    resume state, and reserves its place; its TF server listens on a free port of its share of
    the TF ports ([0]: any; `port_share`). Whatever fails is reported to the driver with its
    traceback; the task then ends without an error (it is not Spark's to retry or to log again),
    unless the driver could not be told. A TF node's task runs again only when its executor was lost, and a TF cluster
    cannot take a node at a new address: the retry of a parameter-server worker reports the
    worker lost and returns (the chief goes on with the other workers); any other retry fails
    the attempt."""

    def run_node(partition: int, records: Iterator[tuple[str, bytes]]):
        from pyspark import TaskContext

        from tfos_jobs.cluster.node import inputs
        from tfos_jobs.cluster.node.control_client import ControlClient, DriverLink, authenticated

        role, index = roles(launch.strategy, launch.nodes, launch.num_ps)[partition]
        name = node_name(role, index)
        task = TaskContext.get()
        client = ControlClient(launch.server, secret)
        link = DriverLink(client, {cc.SENDER_NODE: name})
        if task is not None and task.attemptNumber() > 0:
            try:
                if launch.strategy == Strategy.PARAMETER_SERVER and role == Role.WORKER:
                    link.lost()
                    return iter(())
                raise RuntimeError(f"TF node {name} was lost with its executor; a TF cluster cannot take a "
                                   "replacement node")
            finally:
                client.close()
        try:
            workspace = Workspace.of(launch.local_dir, launch.run_id, name)
            workspace.enter()
            lifecycle.start_reaper(os.getpid(), [], workspace)  # a cancelled task's files go too
            try:
                inputs.receive(records, launch.inputs[partition], workspace.root)
                if role == Role.CHIEF or launch.strategy == Strategy.MULTI_WORKER_MIRRORED:  # BackupAndRestore reads it
                    link.fetch(cc.BACKUP, workspace.backup)
                if launch.tf_ports != [0]:  # TFoS's TF server port
                    share = port_share(launch.tf_ports, partition, launch.nodes)
                    os.environ["TENSORFLOW_PORT"] = str(free_port(share))
                with running(Node(link, workspace)), authenticated(secret):
                    node_fn(iter([partition]))
            finally:
                workspace.leave()
            return iter(())
        except Exception as e:
            told = False
            with contextlib.suppress(Exception):
                link.failed(local_disk.explained(e, traceback.format_exc(), launch.local_dir))
                told = True
            if not told:  # the driver learns it from Spark's record of the failed task
                raise
            # The driver has the traceback (the node's error file and the summary): failing the
            # task too would print it again, in Spark's log of the lost task.
            return iter(())
        except BaseException:
            with contextlib.suppress(Exception):
                link.failed(traceback.format_exc())
            raise
        finally:
            client.close()

    return run_node


def port_share(ports: list[int], node: int, nodes: int) -> list[int]:
    """The ports node `node` of `nodes` may take: every `nodes`-th port from its own offset.
    A free port is only free until TF binds it, moments later; two nodes on one host that
    drew from the same ports could both find one free and the second TF server would fail
    to start. Disjoint shares make that impossible within a run."""
    return ports[node::nodes]


def free_port(ports: list[int]) -> int:
    """A port of `ports` nothing listens on now (TF binds it moments later)."""
    import random
    import socket

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


def _partition() -> int | None:
    from pyspark import TaskContext

    task = TaskContext.get()
    return task.partitionId() if task is not None else None


def serve(cluster: dict[str, list[str]], role: str, index: int, link, max_seconds: float) -> None:
    """A parameter server or PS-mode worker: serve the chief until the run is done."""
    import tensorflow as tf

    tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=role, task_index=index, protocol="grpc", start=True)
    status = lifecycle.wait_until_done(link, max_seconds)
    if status == lifecycle.TIMEOUT:
        raise TimeoutError(f"{role} {index}: the chief did not finish within {max_seconds:.0f} s")


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
