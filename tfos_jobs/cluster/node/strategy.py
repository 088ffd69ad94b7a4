"""A TF node's distribution strategy, and how its workers sum their gradients."""
from __future__ import annotations

import json
import os
from typing import Any

from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.cluster.node import gradient_mesh, peers
from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.topology import ALL_REDUCE, Strategy, choose_exchange


def make_strategy(name: str, num_workers: int = 1):
    """A one-worker cluster has nothing to all-reduce with: it trains as one process does, without MultiWorkerMirrored's
    per-step collectives. A TF cluster's strategy starts once the peers it connects to listen (`peers`)."""
    import tensorflow as tf

    if name == Strategy.MULTI_WORKER_MIRRORED and num_workers > 1:
        peers.await_servers(name)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        # Otherwise every step all-reduces whether each worker still has a batch, to end an
        # epoch together on uneven data: one more collective per step (a quarter of a
        # two-worker step here), and never needed, since training and validation data repeat.
        strategy.extended.experimental_enable_get_next_as_optional = False
        return strategy
    if name == Strategy.PARAMETER_SERVER:
        peers.await_servers(name)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)
    return tf.distribute.get_strategy()


def gradient_exchange_for(args: NodeArgs, num_workers: int, variables: list) -> str:
    """How this run sums gradients across workers (`model.exchange`); ALL_REDUCE where nothing crosses workers by
    all-reduce (one worker, parameter servers), which leaves the optimizer's own aggregation in place."""
    if args.train.strategy != Strategy.MULTI_WORKER_MIRRORED or num_workers < 2:
        return ALL_REDUCE
    gradient_bytes = sum(v.shape.num_elements() * v.dtype.size for v in variables)
    return choose_exchange(args.train.gradient_exchange, num_workers, gradient_bytes)


def open_mesh(strategy: Any, link: DriverLink, timeout: float, rank: int, ports: tuple[int, ...]) -> gradient_mesh.Mesh:
    """This worker's gradient mesh, keyed to the run's secret and attempt, on one of `ports` (its
    share of train.tf_ports; any free port if empty). A step that hears nothing from a peer for
    `timeout` s (train.step_timeout, the driver's hang check) fails."""
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    return gradient_mesh.open_mesh(strategy, secret=link.client.secret, run_id=link.client.run, rank=rank,
                                   hosts=gradient_mesh.hosts_by_rank(cluster), timeout=timeout, ports=ports)
