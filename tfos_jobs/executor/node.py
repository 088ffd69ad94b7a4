"""The function TensorFlowOnSpark runs on every TF node (executor side).

TFoS starts one node per executor, labels them `chief` and `worker`, sets TF_CONFIG and
CUDA_VISIBLE_DEVICES (from the GPU addresses Spark assigned the task), and calls
`main_fun(args, ctx)`. For parameter-server training the last `num_ps` workers are turned
into parameter servers here, so that every node runs in the foreground and returns on its
own: TFoS's own ps handling would park them in background processes that outlive the run.
"""
from __future__ import annotations

import json
import os
import time
import traceback
from typing import Any

from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.run_dir import RunDir
from tfos_jobs.executor import lifecycle


def assign_role(strategy: str, num_ps: int, job_name: str, task_index: int,
                cluster: dict[str, list[str]]) -> tuple[str, int, dict[str, list[str]]]:
    """(role, index, cluster spec) of this node. TFoS names chief + workers; with
    parameter_server the last `num_ps` workers become `ps`."""
    if strategy != "parameter_server" or job_name != "worker":
        return job_name, task_index, _remap(strategy, num_ps, cluster)
    workers = cluster["worker"]
    first_ps = len(workers) - num_ps
    if task_index >= first_ps:
        return "ps", task_index - first_ps, _remap(strategy, num_ps, cluster)
    return "worker", task_index, _remap(strategy, num_ps, cluster)


def _remap(strategy: str, num_ps: int, cluster: dict[str, list[str]]) -> dict[str, list[str]]:
    if strategy != "parameter_server":
        return cluster
    workers = cluster["worker"]
    first_ps = len(workers) - num_ps
    out = {"chief": cluster["chief"], "ps": workers[first_ps:]}
    if first_ps:
        out["worker"] = workers[:first_ps]
    return out


def main_fun(node_args: dict[str, Any], ctx) -> None:
    """`node_args`: `NodeArgs.to_dict()` (TFoS hands them on as given)."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    from tfos_jobs.executor.training import configure_threads

    args = NodeArgs.from_dict(node_args)
    threads = configure_threads(args.threads)  # before TensorFlow starts its pools
    strategy = args.strategy
    role, index, cluster = assign_role(strategy, args.num_ps, ctx.job_name, ctx.task_index, ctx.cluster_spec)
    if role == "ps":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # parameter servers hold variables, never compute on a GPU
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
    run = RunDir(args.run_dir)
    node = run.node_name(role, index)
    manager_pid = _manager_pid()
    lifecycle.start_reaper(os.getpid(), [manager_pid] if manager_pid else [])
    run.write_node(node, {
        "role": role, "index": index, "executor_id": ctx.executor_id, "partition": _partition(), "pid": os.getpid(),
        "manager_pid": manager_pid, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "cluster": cluster, "started": time.time(), "threads": threads,
    })
    status = "failed"
    try:
        if strategy == "parameter_server" and role in ("ps", "worker"):
            serve(cluster, role, index, run, args.max_node_seconds)
        else:
            from tfos_jobs.executor import training

            workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
            worker_index = 0 if role == "chief" else index + 1
            training.fit_and_export(args, role=role, worker_index=worker_index, num_workers=workers)
        status = "ok"
    except BaseException:
        run.write_error(node, traceback.format_exc())
        raise
    finally:
        if role == "chief":
            run.mark_done(status)
        _stop_manager()


def guard(node_fn, run_dir: str, strategy: str, secret: bytes, tf_ports: list[int], nodes: int):
    """Wraps TFoS's node function for `mapPartitions` (it yields nothing).

    The node reserves its place over the authenticated control channel with this run's
    `secret` (it reaches the node only in this closure); its TF server listens on a free port
    of its share of `tf_ports` ([0]: any; `port_share`). A TF node's task runs again only
    when its executor was lost, and a TF cluster cannot take a node at a new address: the
    retry of a parameter-server worker returns at once (the chief goes on with the other
    workers, and the driver counts the worker as lost); any other retry fails the attempt."""

    run = RunDir(run_dir)

    def run_node(iterator):
        from pyspark import TaskContext

        from tfos_jobs import control_channel
        from tfos_jobs.executor.reservation_client import authenticated

        task = TaskContext.get()
        if task is None or task.attemptNumber() == 0:
            if tf_ports != [0]:  # TFoS's TF server port
                share = port_share(tf_ports, task.partitionId() if task is not None else 0, nodes)
                os.environ["TENSORFLOW_PORT"] = str(free_port(share))
            try:
                with authenticated(secret):
                    node_fn(iterator)
            except control_channel.AuthenticationError as e:
                name = f"task-{task.partitionId()}" if task is not None else "task"
                run.write_error(name, f"AuthenticationError: {e}\n")
                raise
            return iter(())
        node = run.node_of_partition(task.partitionId())
        if strategy == "parameter_server" and node is not None and run.role_of(node) == "worker":
            run.mark_lost(node)
            return iter(())
        what = f"TF node {node}" if node else f"the TF node of task {task.partitionId()}"
        raise RuntimeError(f"{what} was lost with its executor; a TF cluster cannot take a replacement node")

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

    for port in random.sample(ports, len(ports)):
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


def serve(cluster: dict[str, list[str]], role: str, index: int, run: RunDir, max_seconds: float) -> None:
    """A parameter server or PS-mode worker: serve the chief until the run is done."""
    import tensorflow as tf

    tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=role, task_index=index, protocol="grpc", start=True)
    status = lifecycle.wait_until_done(run, max_seconds)
    if status == "timeout":
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
