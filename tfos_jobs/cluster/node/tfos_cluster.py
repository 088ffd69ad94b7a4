"""TensorFlowOnSpark, the engine that forms a TF cluster out of Spark tasks: the one module of the package that imports
it (a structure test keeps it so).

A node reserves its place as TFoS's node runtime does (its host, by TFoS's rule; its job, task index and port; its
partition as TFoS's `executor_id`), waits for every node of the run, and takes the cluster spec TFoS builds from the
reservations; on a GPU host whose task Spark gave no GPU, TFoS's allocator picks a free one. The reservations travel
over the package's authenticated control channel (`control_client.ControlClient.reserve`), never over TFoS's
pickle-speaking socket, and no TFoS manager process starts: the node reads its data from its own disk, not from Spark
through TFoS's queues.
"""
from __future__ import annotations

import os

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.node.control_client import ControlClient
from tfos_jobs.topology import Role

KUBERNETES_POD = "SPARK_EXECUTOR_POD_IP"  # set in an executor pod: nvidia-smi there may show GPUs of other pods


def preload() -> None:
    """TFoS's modules imported ahead, while the node's task still receives its inputs."""
    from tensorflowonspark import TFSparkNode, gpu_info, util  # noqa: F401


def form(client: ControlClient, *, partition: int, role: str, index: int, port: int) -> dict[str, list[str]]:
    """This node's reservation (TF server on `port`), then the cluster spec of the whole run."""
    from tensorflowonspark import TFSparkNode, util

    reservation = {"executor_id": partition, "host": util.get_ip_address(), "job_name": role, "task_index": index,
                   "port": port}
    reservations = client.reserve({k: reservation[k] for k in cc.NODE_FIELDS})
    return TFSparkNode._get_cluster_spec(sorted(reservations, key=lambda r: r["executor_id"]))


def gpus(task_gpus: list[str] | None, *, role: str, cluster: dict[str, list[str]], index: int) -> str | None:
    """CUDA_VISIBLE_DEVICES for the node: none on a parameter server (it holds variables, never computes); the GPUs
    Spark gave its task; else, off Kubernetes on a host with GPUs, one free GPU by TFoS's allocator, hinted by the
    node's place among its peers on the host. None: leave what the process sees."""
    if role == Role.PS:
        return ""
    if task_gpus:
        return ",".join(task_gpus)
    if KUBERNETES_POD in os.environ:
        return None
    from tensorflowonspark import gpu_info

    if not gpu_info.is_gpu_available():
        return None
    hint = 0
    if cluster:
        mine = cluster[role][index]
        peers = [a for addresses in cluster.values() for a in addresses if a.split(":")[0] == mine.split(":")[0]]
        hint = peers.index(mine)
    return ",".join(gpu_info.get_gpus(1, hint, format=gpu_info.AS_LIST))
