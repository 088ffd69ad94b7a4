"""`tfos train` with its run in MLflow (`[tracking]`): params before, epochs as they come,
figures, plots and the model after. Tracking never fails or holds up the training."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Callable

from pyspark.sql import SparkSession

from tfos_jobs.config import Config
from tfos_jobs.contracts.metrics import Metrics
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.model.builder import CheckedBuild
from tfos_jobs.model.train_function import CheckedFunction
from tfos_jobs.jobs.train.driver import job as train
from tfos_jobs.storage import Storage
from tfos_jobs.tracking.model_log import CONFIG_ARTIFACT, log_training
from tfos_jobs.tracking.params import config_params
from tfos_jobs.tracking.run_logger import Tracking


def run(spark: SparkSession, config: Config, *, overwrite: bool = False, log: Callable[[str], None] = print,
        model: CheckedBuild | None = None, meta: DatasetMeta | None = None,
        fn: CheckedFunction | None = None) -> Metrics:
    """`train.run`, tracked when `[tracking]` names a server; `model`, `meta` and `fn`: as `train.run` takes them."""
    if not config.tracking.enabled:
        return train.run(spark, config, overwrite=overwrite, log=log, model=model, meta=meta, fn=fn)
    tc = config.tracking
    tracking = Tracking(tc, log)
    storage = Storage(spark)
    model_dir = train.model_directory(storage, config.train)
    name = os.path.basename(model_dir.path.rstrip("/")) or "model"
    run = tracking.start_run(f"train {name}", tags={"tfos.command": "train", "tfos.model_dir": model_dir.path,
                                                     "tfos.dataset": config.train.dataset})
    params = config_params(config)
    run.params(params)
    log(f"tracking: logging to {tracking.where}, experiment {tc.experiment!r}")
    with tempfile.TemporaryDirectory(prefix="tfos-tracking-") as workdir:
        with open(os.path.join(workdir, CONFIG_ARTIFACT), "w", encoding="utf-8") as fh:
            json.dump(params, fh, indent=2)
        run.artifact(os.path.join(workdir, CONFIG_ARTIFACT))
        try:
            metrics = train.run(spark, config, overwrite=overwrite, log=log, on_epoch=run.epoch, model=model, meta=meta, fn=fn,
                                model_dir=model_dir)
        except BaseException:
            run.end("FAILED")
            tracking.wait()
            raise
        try:
            log_training(run, storage, model_dir, metrics, workdir, tc.register, tc.alias, log)
        except Exception as e:  # the model is trained and saved; only its logging is lost
            log(f"warning: tracking: the trained model could not be logged ({type(e).__name__}: {e})")
        run.end("FINISHED")
        if tracking.wait():
            log(f"tracking: run {run.id} in experiment {tc.experiment!r}")
    return metrics
