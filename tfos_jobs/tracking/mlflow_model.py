"""A tfos SavedModel as an MLflow model, and back.

    model/
      MLmodel                    flavors: python_function (tracking.pyfunc_model) and tfos_jobs
      artifacts/saved_model/     the SavedModel as exported, assets (spec, vocabularies) included
      python_model.pkl  requirements.txt  ...

The `tfos_jobs` flavor names where the SavedModel is; tfos reads only that (and never
unpickles anything) when it serves a registered model.
"""
from __future__ import annotations

import os
from typing import Any

from tfos_jobs.contracts.mlflow_layout import FLAVOR, MLMODEL, saved_model_path

ARTIFACT_PATH = "model"  # where the model goes in its run's artifacts


def save(saved_model_dir: str, out_dir: str) -> str:
    """Write the MLflow model of the SavedModel in `saved_model_dir` (a local copy) to `out_dir`."""
    import mlflow.pyfunc
    from mlflow.models import Model

    from tfos_jobs import __version__
    from tfos_jobs.tracking.pyfunc_model import SAVED_MODEL, SavedModelPyfunc
    from tfos_jobs.tf_import import tensorflow

    model = Model()
    model.add_flavor(FLAVOR, saved_model=f"artifacts/{SAVED_MODEL}", tfos_jobs_version=__version__)
    mlflow.pyfunc.save_model(out_dir, python_model=SavedModelPyfunc(), artifacts={SAVED_MODEL: saved_model_dir},
                             mlflow_model=model,
                             pip_requirements=[f"tfos-jobs=={__version__}", f"tensorflow=={tensorflow().__version__}"])
    return out_dir


def saved_model_in(model_dir: str, where: str) -> str:
    """The SavedModel inside a downloaded MLflow model; `where` names it in errors."""
    from tfos_jobs.errors import ConfigError

    path = os.path.join(model_dir, MLMODEL)
    try:
        with open(path, encoding="utf-8") as fh:
            relative = saved_model_path(fh.read())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where} is not an MLflow model: {MLMODEL} cannot be read ({e})") from None
    if isinstance(relative, list):
        raise ConfigError(f"{where} holds no SavedModel tfos can find (its flavors: {relative}); tfos serves the models "
                          f"tfos train and tfos sweep log, and MLflow's tensorflow flavour")
    return os.path.join(model_dir, relative)
