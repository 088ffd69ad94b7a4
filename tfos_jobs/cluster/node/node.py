"""A TF node: one start-up for every way a node runs.

A node runs in its own process on an executor (`cluster.node.process`), in a TF cluster whose place it reserves through
`cluster.node.tfos_cluster`, alone (the `local` strategy: a sweep's single-process trial), or in the place of a lost
parameter-server worker; the driver's `local` run is a node too (`cluster.driver.local`). Each comes here with its
`Place`: `run` sets TensorFlow's threads, the node's GPUs and TF_CONFIG once, reports the node to the driver, and
trains (or serves the chief, under parameter_server). It reports to the driver over the control channel only
(`cluster.node.control_client.DriverLink`) and trains from the files its task wrote to the workspace.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Iterator

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.metrics import NodeRecord
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node import lifecycle, spark_executor, tfos_cluster
from tfos_jobs.cluster.node.control_client import ControlClient, DriverLink
from tfos_jobs.tf_import import tensorflow
from tfos_jobs.topology import Role, Strategy, training_workers, worker_rank


@dataclass(frozen=True)
class Node:
    """What the node's process knows of itself beside its launch: its line to the driver, its
    workspace and its partition of the node job."""

    link: DriverLink
    workspace: Workspace
    partition: int
    ports: tuple[int, ...] = ()  # its share of train.tf_ports (TF server, gradient mesh); empty: any free port

    def record(self, place: "Place", threads: int) -> NodeRecord:
        """What the node tells the driver of itself when it starts (kept in the model directory)."""
        return NodeRecord(partition=self.partition, host=socket.gethostname(), pid=os.getpid(), python=sys.executable,
                          cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""), started=time.time(),
                          role=place.role, index=place.index, executor_id=spark_executor.executor_id(),
                          cluster=place.cluster, threads=threads)


@dataclass(frozen=True)
class Place:
    """Where a node stands in its run: its role and index, and the TF cluster spec it is part of ({}: alone)."""

    role: str
    index: int
    cluster: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def alone(cls) -> "Place":
        return cls(Role.CHIEF.value, 0)


def run(args: NodeArgs, node: Node, place: Place, *, pruning: bool = False, own_process: bool = True) -> None:
    """Start the node at `place` and do its part of the run. Under parameter_server a worker or ps serves the chief
    until the run is done; every other node trains, and the chief reports the run's end status. With `pruning` a lone
    node asks the driver after each epoch whether to go on and ends without an export when told to stop (RUN_PRUNED).
    `own_process`: the process is the node's alone (an executor's, not the driver's), so the node picks its GPUs and
    its temporary files go to its workspace."""
    tensorflow(devices=False)  # quiet; its devices once CUDA_VISIBLE_DEVICES is settled below
    from tfos_jobs.cluster.node import training

    threads = training.configure_threads(args.train.threads)  # before TensorFlow starts its pools
    devices = tfos_cluster.gpus(_task_gpus(), role=place.role, cluster=place.cluster, index=place.index)
    if devices is not None and own_process:
        os.environ["CUDA_VISIBLE_DEVICES"] = devices
    if place.cluster:
        os.environ["TF_CONFIG"] = json.dumps({"cluster": place.cluster,
                                              "task": {"type": place.role, "index": place.index}})
    tensorflow()  # the devices, now that CUDA_VISIBLE_DEVICES is settled
    node.link.started(node.record(place, threads))
    if args.train.strategy == Strategy.PARAMETER_SERVER and place.role in (Role.PS, Role.WORKER):
        serve(place, node.link, args.max_node_seconds)
        return
    pruner = training.pruning(node.link) if pruning else None
    status = cc.RUN_FAILED
    try:
        rank, workers = worker_rank(place.role, place.index), training_workers(place.cluster) or 1
        extra = (pruner,) if pruner else ()
        with training.temp_files_in(node.workspace.scratch) if own_process else _nothing():
            if args.own_training:  # the user's training function, in place of the package's fit
                from tfos_jobs.cluster.node import train_context

                train_context.run(args, role=place.role, index=place.index, cluster=place.cluster, worker_index=rank,
                                  num_workers=workers, link=node.link, workspace=node.workspace,
                                  extra_callbacks=extra, in_scratch=own_process)
            else:
                training.fit_and_export(args, role=place.role, worker_index=rank, num_workers=workers,
                                        link=node.link, workspace=node.workspace, ports=node.ports,
                                        extra_callbacks=extra)
        status = cc.RUN_PRUNED if pruner is not None and pruner.skip_export else cc.RUN_OK
    finally:
        if place.role == Role.CHIEF:
            node.link.done(status)


def in_cluster(client: ControlClient, *, partition: int, role: str, index: int, ports: tuple[int, ...]) -> Place:
    """The node's place in a TF cluster that forms now: TensorFlowOnSpark's reservation, on a port of the node's
    share of train.tf_ports (any free port when it has none)."""
    port = free_port(list(ports)) if ports else _any_free_port()
    return Place(role, index, tfos_cluster.form(client, partition=partition, role=role, index=index,
                                                port=port))


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


def serve(place: Place, link: DriverLink, max_seconds: float) -> None:
    """A parameter server or PS-mode worker: serve the chief until the run is done."""
    import tensorflow as tf

    tf.distribute.Server(tf.train.ClusterSpec(place.cluster), job_name=place.role, task_index=place.index,
                         protocol="grpc", start=True)
    status = lifecycle.wait_until_done(link, max_seconds)
    if status == lifecycle.TIMEOUT:
        raise TimeoutError(f"{place.role} {place.index}: the chief did not finish within {max_seconds:.0f} s")


def _task_gpus() -> list[str] | None:
    """The GPUs Spark assigned the node's task, if any."""
    from pyspark import TaskContext

    task = TaskContext.get()
    resources = task.resources() if task is not None else {}
    return list(resources["gpu"].addresses) if "gpu" in resources else None


def _any_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield
