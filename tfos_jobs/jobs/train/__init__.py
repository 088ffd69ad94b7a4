"""The train job: a dataset -> a SavedModel, trained in this process (`local`) or by TF nodes
started on the executors (a TF cluster, or a sweep trial's lone node).

  driver/  the job: the model directory, the attempts (through `tfos_jobs.cluster`), the report
The nodes' side is `tfos_jobs.cluster.node`.
"""
from tfos_jobs.jobs.train.driver.job import run

__all__ = ["run"]
