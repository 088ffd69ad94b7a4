"""A TF node's own process, started by its Spark task (`cluster.node.task`) on the executor: `python -m
tfos_jobs.cluster.node.process`, with what it needs as JSON on its standard input (the launch, its partition, the run's
secret, its workspace's node directory, and its task's context: `TaskContext.get()` answers in this process as in the
task). The task starts it before the node's inputs arrive, and writes the spec once they are all on disk.

It connects to the control server (directly, or through the driver's relay), fetches the resume
state, finds its place (alone under `local`; a lost worker's, given by its task; else reserved in a TF
cluster that forms now) and runs the node from there (`cluster.node.node.run`). Whatever fails is
reported to the driver with its traceback; the exit code says whether it was told (1) or not.
"""
from __future__ import annotations

import json
import sys
import traceback
from typing import Any

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.node import local_disk
from tfos_jobs.cluster.node.control_client import ControlClient, DriverLink
from tfos_jobs.contracts.node_args import Launch
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.topology import Role, Strategy, node_name, roles

EXIT_OK, EXIT_REPORTED, EXIT_UNREPORTED = 0, 1, 2


def main() -> int:
    from pyspark import TaskContext

    _preload()
    spec = json.loads(sys.stdin.read())
    TaskContext._setTaskContext(TaskContext.from_json(spec["task"]))  # the task this process runs for
    launch, partition = Launch.from_json(spec["launch"]), int(spec["partition"])
    secret = bytes.fromhex(spec["secret"])
    role, index = roles(launch.strategy, launch.nodes, launch.num_ps)[partition]
    name = node_name(role, index)
    try:
        client = ControlClient(launch.server, secret, relayed=launch.relayed, run=launch.run_id)
    except cc.ControlError:
        traceback.print_exc()
        return EXIT_UNREPORTED
    link = DriverLink(client, {cc.SENDER_NODE: name})
    workspace = launch.workspace(spec["workspace"])
    try:
        run(launch, partition, client, link, workspace, spec)
        return EXIT_OK
    except Exception as e:
        try:
            link.failed(local_disk.explained(e, traceback.format_exc(), launch.local_dir))
            return EXIT_REPORTED
        except Exception:
            traceback.print_exc()
            return EXIT_UNREPORTED
    finally:
        client.close()


def _preload() -> None:
    """TensorFlow and TensorFlowOnSpark imported while the task still receives the node's inputs
    (the spec comes after them). Nothing is configured yet: the threads and the devices are set
    once the spec says how (TensorFlow starts its pools and probes its devices later)."""
    from tfos_jobs.cluster.node import tfos_cluster
    from tfos_jobs.tf_import import tensorflow

    tensorflow(devices=False)
    tfos_cluster.preload()


def run(launch: Launch, partition: int, client: ControlClient, link: DriverLink, workspace: Workspace,
        spec: dict[str, Any]) -> None:
    from tfos_jobs.cluster.node import node

    role, index = roles(launch.strategy, launch.nodes, launch.num_ps)[partition]
    share = tuple(node.port_share(launch.tf_ports, partition, launch.nodes)) if launch.tf_ports != [0] else ()
    context = node.Node(link=link, workspace=workspace, partition=partition, ports=share)
    if role == Role.CHIEF or launch.strategy in (Strategy.MULTI_WORKER_MIRRORED, Strategy.LOCAL):
        link.fetch(cc.BACKUP, workspace.backup)  # BackupAndRestore reads it
    if launch.strategy == Strategy.LOCAL:
        place = node.Place.alone()
    elif spec.get("place"):  # a lost parameter-server worker's, taken by its task's retry: the cluster formed long ago
        taken = spec["place"]
        place = node.Place(str(taken["role"]), int(taken["index"]), dict(taken["cluster"]))
    else:
        place = node.in_cluster(client, partition=partition, role=role, index=index, ports=share)
    node.run(launch.args, context, place, pruning=launch.pruning)


if __name__ == "__main__":
    sys.exit(main())
