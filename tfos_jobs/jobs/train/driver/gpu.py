"""Spark resource settings that put each TF node on its own GPUs."""
from __future__ import annotations

import os
from pathlib import Path

from tfos_jobs import resources
from tfos_jobs.config import TrainConfig

GPU_VENDOR = "nvidia.com"


def gpu_conf(train: TrainConfig) -> dict[str, str]:
    """Spark settings a session starts with to give each TF node task `gpus_per_worker` GPUs; none without."""
    if train.gpus_per_worker <= 0:
        return {}
    amount = str(train.gpus_per_worker)
    script = discovery_script(train.gpu_discovery_script, resources.gpu_discovery_script(),
                              os.environ.get("PYSPARK_PYTHON", ""))
    return {
        "spark.executor.resource.gpu.amount": amount,
        "spark.task.resource.gpu.amount": amount,
        "spark.executor.resource.gpu.discoveryScript": script,
        # Kubernetes: the device plugin's resource name; executor pods then request nvidia.com/gpu
        # (the other cluster managers ignore it)
        "spark.executor.resource.gpu.vendor": GPU_VENDOR,
        # standalone workers (and local-cluster) discover the GPUs they offer themselves
        "spark.worker.resource.gpu.amount": amount,
        "spark.worker.resource.gpu.discoveryScript": script,
    }


def discovery_script(configured: str, shipped: str, executor_python: str) -> str:
    """The discovery script's path as executors will see it. A configured one is taken as given (relative: from the
    executor's working directory, e.g. a file shipped with --files). The package's own: inside the environment archive
    when executors run one (`executor_python` is `./<archive>/bin/python` in every YARN container), else at this
    installation's path, which must then be the same on every host (one install everywhere, or the image)."""
    if configured:
        return configured if configured.startswith("./") else os.path.abspath(configured)
    if executor_python.startswith("./") and executor_python.endswith("/bin/python"):
        from tfos_jobs.contracts.packed_env import site_packages

        archive = Path(executor_python[2:-len("/bin/python")])
        return "./" + str(site_packages(archive) / "tfos_jobs" / "resources" / Path(shipped).name)
    return os.path.abspath(shipped)
