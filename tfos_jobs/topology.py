"""The shape of a training run: strategies, node roles, how many nodes, which node is what,
how gradients are summed, how many examples a step takes.

Plain Python, no TensorFlow: the config validates against it, the driver sizes and names the
TF cluster with it, the nodes take their roles from it and the benchmarks describe their runs
with it. Every other module compares with these names instead of typing them.

A node job's partition 0 is the chief; under `parameter_server` the last `ps` partitions are the parameter servers, and
the others are workers (`roles`). Each node reserves its place under that role, so the cluster spec it joins names it so.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tfos_jobs.names import Name


class Strategy(Name):
    """`train.strategy`: how the model's steps are spread over processes."""

    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"  # every worker takes a batch; gradients summed each step
    PARAMETER_SERVER = "parameter_server"  # a chief coordinates workers; variables live on parameter servers
    LOCAL = "local"  # one process, no TF cluster: the driver's, or a sweep trial's lone node on an executor


class Role(Name):
    """What a TF node is in its cluster (TF_CONFIG's task type)."""

    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"


STRATEGIES = tuple(s.value for s in Strategy)

# How a multi_worker_mirrored step sums its gradients (model/exchange.py carries them out):
# the setting, and what a run records.
AUTO, ALL_GATHER, ALL_REDUCE, MESH = "auto", "all_gather", "all_reduce", "mesh"
EXCHANGES = (AUTO, MESH, ALL_GATHER, ALL_REDUCE)
# How a node's input files reach its local disk (cluster.driver.node_inputs): copied by its
# executor and moved into place, or sent to the node's task in chunks.
SPOOL, CHUNKS = "spool", "chunks"
DELIVERIES = (SPOOL, CHUNKS)
if TYPE_CHECKING:  # a type checker reads the settings as str; the config loader checks their values
    StrategyName = str
    ExchangeName = str
    DeliveryName = str
else:  # the config's field types: `Literal` of the names above, typed once
    StrategyName, ExchangeName, DeliveryName = Literal[STRATEGIES], Literal[EXCHANGES], Literal[DELIVERIES]
GATHER_BYTES = 256 * 1024  # auto: above two workers, packs up to this size are gathered


def node_count(strategy: str, workers: int, ps: int) -> int:
    """Processes a run needs: `local` one; multi_worker_mirrored `workers` (one of them the
    chief); parameter_server a chief (the coordinator), `workers` and `ps` servers."""
    if strategy == Strategy.LOCAL:
        return 1
    if strategy == Strategy.PARAMETER_SERVER:
        return 1 + workers + ps
    return workers


def parameter_servers(strategy: str, ps: int) -> int:
    return ps if strategy == Strategy.PARAMETER_SERVER else 0


def examples_per_step(strategy: str, batch_size: int, workers: int) -> int:
    """Examples one training step consumes: a batch per worker under multi_worker_mirrored,
    one batch (on one worker) under parameter_server and local."""
    return batch_size * (workers if strategy == Strategy.MULTI_WORKER_MIRRORED else 1)


def node_name(role: str, index: int) -> str:
    return f"{Role(role).value}-{index}"


def worker_rank(role: str, index: int) -> int:
    """A training worker's place among the chief and the workers (the chief is 0): which shard
    of the train split it reads."""
    return 0 if role == Role.CHIEF else index + 1


def training_workers(cluster: dict[str, list[str]]) -> int:
    """The nodes of a cluster spec that train: the chief and the workers."""
    return len(cluster.get(Role.CHIEF.value, [])) + len(cluster.get(Role.WORKER.value, []))


def roles(strategy: str, nodes: int, num_ps: int) -> list[tuple[str, int]]:
    """(role, index) of the node of each partition of the node job."""
    ps = num_ps if strategy == Strategy.PARAMETER_SERVER else 0
    workers = nodes - 1 - ps
    return ([(Role.CHIEF.value, 0)] + [(Role.WORKER.value, i) for i in range(workers)]
            + [(Role.PS.value, i) for i in range(ps)])


def choose_exchange(setting: str, workers: int, gradient_bytes: int) -> str:
    """The exchange a step uses: `setting` unless it is "auto"."""
    if setting not in EXCHANGES:
        raise ValueError(f"gradient exchange {setting!r} is not one of {', '.join(EXCHANGES)}")
    if setting != AUTO:
        return setting
    return MESH if workers == 2 or gradient_bytes <= GATHER_BYTES else ALL_REDUCE
