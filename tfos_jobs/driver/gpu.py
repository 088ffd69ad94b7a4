"""Spark resource settings that put each TF node on its own GPUs."""
from __future__ import annotations

from tfos_jobs.config import TrainConfig


def gpu_conf(tr: TrainConfig, discovery_script: str) -> dict[str, str]:
    """Spark settings that give each TF node task `gpus_per_worker` GPUs; none without GPUs."""
    if tr.gpus_per_worker <= 0:
        return {}
    amount = str(tr.gpus_per_worker)
    return {
        "spark.executor.resource.gpu.amount": amount,
        "spark.task.resource.gpu.amount": amount,
        "spark.executor.resource.gpu.discoveryScript": discovery_script,
        # standalone workers (and local-cluster) discover the GPUs they offer themselves
        "spark.worker.resource.gpu.amount": amount,
        "spark.worker.resource.gpu.discoveryScript": discovery_script,
    }
