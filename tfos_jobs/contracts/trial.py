"""What the sweep (driver) hands the task of a single-process trial (executor): plain values
only, inside the task's closure. The control channel's secret travels beside it, never in it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tfos_jobs.contracts.node_args import NodeArgs


@dataclass(frozen=True)
class TrialPayload:
    trial: int
    settings: Mapping[str, Any]  # the trial's parameter values, by key
    metric: str  # the sweep's metric, as the epoch logs name it
    pruning: bool  # after each epoch, ask the driver (control_channel.SHOULD_PRUNE) whether to stop
    args: NodeArgs  # how to train
    server: tuple[str, int]  # the sweep's control server
    run_id: str
    local_dir: str  # train.local_dir: where the trial's workspace goes on the executor
    inputs: Mapping[str, str]  # the dataset's files: key -> place in the workspace
