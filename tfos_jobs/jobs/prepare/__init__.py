"""The prepare job: raw tables -> train/eval (and test) TFRecords + `_meta/` (contracts.dataset).

Rows become tf.Examples (`rows`), sensor series windows of tf.SequenceExamples (`windows`);
both write through `data.dataset`, whole or not at all; `tfos sources` is `source_report`.
"""
from __future__ import annotations

import time
from typing import Callable

from pyspark.sql import SparkSession

from tfos_jobs.config import Config
from tfos_jobs.contracts.dataset import Manifest
from tfos_jobs.errors import OutputExistsError
from tfos_jobs.jobs.prepare import rows, windows
from tfos_jobs.storage import Storage
from tfos_jobs.worker_python import check_worker_python


def run(spark: SparkSession, config: Config, *, overwrite: bool = False,
        log: Callable[[str], None] = print) -> Manifest:
    """Run the job; returns the manifest it wrote."""
    started = time.time()
    fs = Storage.as_spark_sees(spark)
    out = fs.qualify(config.prepare.output.rstrip("/"))
    if fs.exists(out) and not (overwrite or config.prepare.overwrite):
        raise OutputExistsError(f"output directory {out!r} exists; pass --overwrite to replace it")
    check_worker_python(spark)  # the executors' Python imports this package, or a clear error now
    job = windows if config.features.is_sequence else rows
    return job.run(spark, config, fs, out, started, log)
