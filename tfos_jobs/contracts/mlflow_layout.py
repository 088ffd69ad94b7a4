"""Where an MLflow model keeps its SavedModel: what tfos logs (`tracking.mlflow_model`) and what serving finds
(`udfs.model_location`), read from the model's MLmodel file alone."""
from __future__ import annotations

from typing import Any

FLAVOR = "tfos_jobs"  # tfos's own flavor: `saved_model` names the SavedModel's directory
TENSORFLOW_FLAVOR = "tensorflow"  # MLflow's own (mlflow.tensorflow.log_model)
MLMODEL = "MLmodel"  # MLflow's description of a logged model, at its root


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

