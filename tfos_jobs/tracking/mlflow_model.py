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

FLAVOR = "tfos_jobs"
ARTIFACT_PATH = "model"  # where the model goes in its run's artifacts
MLMODEL = "MLmodel"


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


def saved_model_path(mlmodel: str) -> str | list[str]:
    """Where an MLflow model's SavedModel is, relative to its root, from the text of its MLmodel file: tfos's flavor
    names it; MLflow's tensorflow flavor names a TensorFlow module's (`saved_model_dir`) and keeps a tf-keras model
    saved in TensorFlow's format in `<data>/model`. Else the model's flavors, sorted. Read with YAML's safe loader:
    nothing in the file is run."""
    import yaml

    try:
        meta: dict[str, Any] = yaml.safe_load(mlmodel) or {}
    except yaml.YAMLError as e:
        raise ValueError(str(e)) from None
    flavors = meta.get("flavors") or {}
    if FLAVOR in flavors:
        return str(flavors[FLAVOR]["saved_model"])
    tensorflow = flavors.get(TENSORFLOW_FLAVOR) or {}
    if tensorflow.get("saved_model_dir"):
        return str(tensorflow["saved_model_dir"])
    if tensorflow.get("data"):
        return f"{tensorflow['data']}/model"
    return sorted(flavors)


TENSORFLOW_FLAVOR = "tensorflow"  # MLflow's own (mlflow.tensorflow.log_model)
