"""The shape of a training run: strategies, node roles, how many nodes, which node is what,
how gradients are summed, how many examples a step takes.

Plain Python, no TensorFlow: the config validates against it, the driver sizes and names the
TF cluster with it, the nodes take their roles from it and the benchmarks describe their runs
with it. Every other module compares with these names instead of typing them.

TensorFlowOnSpark names the node of partition 0 `chief` and the others `worker` 0..n-2. Under `parameter_server` the
last `ps` of those workers become parameter servers here (`assign_role`), so that every node runs in the foreground and
returns on its own: TFoS's own ps handling would park them in background processes that outlive the run.
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
    cluster = {Role.CHIEF.value: ["-"], Role.WORKER.value: ["-"] * (nodes - 1)}
    return [assign_role(strategy, num_ps, (Role.CHIEF if i == 0 else Role.WORKER).value, max(0, i - 1), cluster)[:2]
            for i in range(nodes)]


def assign_role(strategy: str, num_ps: int, job_name: str, task_index: int,
                cluster: dict[str, list[str]]) -> tuple[str, int, dict[str, list[str]]]:
    """(role, index, cluster spec) of the node TFoS named `job_name` `task_index`."""
    if strategy != Strategy.PARAMETER_SERVER or job_name != Role.WORKER:
        return job_name, task_index, _remap(strategy, num_ps, cluster)
    first_ps = len(cluster[Role.WORKER.value]) - num_ps
    if task_index >= first_ps:
        return Role.PS.value, task_index - first_ps, _remap(strategy, num_ps, cluster)
    return Role.WORKER.value, task_index, _remap(strategy, num_ps, cluster)


def _remap(strategy: str, num_ps: int, cluster: dict[str, list[str]]) -> dict[str, list[str]]:
    if strategy != Strategy.PARAMETER_SERVER:
        return cluster
    workers = cluster[Role.WORKER.value]
    first_ps = len(workers) - num_ps
    out = {Role.CHIEF.value: cluster[Role.CHIEF.value], Role.PS.value: workers[first_ps:]}
    if first_ps:
        out[Role.WORKER.value] = workers[:first_ps]
    return out


def choose_exchange(setting: str, workers: int, gradient_bytes: int) -> str:
    """The exchange a step uses: `setting` unless it is "auto"."""
    if setting not in EXCHANGES:
        raise ValueError(f"gradient exchange {setting!r} is not one of {', '.join(EXCHANGES)}")
    if setting != AUTO:
        return setting
    return MESH if workers == 2 or gradient_bytes <= GATHER_BYTES else ALL_REDUCE
