"""The train job: a dataset -> a SavedModel, trained here (`local`) or by TF nodes on the executors.

  driver/  the job: the model directory, the attempts (through `tfos_jobs.cluster`), the report
The nodes' side is `tfos_jobs.cluster.node`.
"""
from tfos_jobs.jobs.train.driver.job import run

__all__ = ["run"]
