"""Where an MLflow model's SavedModel is, read from its MLmodel file alone."""
from __future__ import annotations

import pytest

from tfos_jobs.contracts.mlflow_layout import saved_model_path
from tfos_jobs.tracking.mlflow_model import saved_model_in


def test_the_flavor_says_where_the_saved_model_is():
    tfos = "flavors:\n  python_function: {}\n  tfos_jobs:\n    saved_model: artifacts/saved_model\n"
    module = "flavors:\n  tensorflow:\n    model_type: tf2-module\n    saved_model_dir: tf2model\n"
    keras = "flavors:\n  tensorflow:\n    model_type: keras\n    data: data\n    save_format: tf\n"
    other = "flavors:\n  sklearn: {}\n  python_function: {}\n"
    assert saved_model_path(tfos) == "artifacts/saved_model"
    assert saved_model_path(module) == "tf2model"
    assert saved_model_path(keras) == "data/model"
    assert saved_model_path(other) == ["python_function", "sklearn"]


def test_an_mlmodel_is_read_without_running_anything_in_it(tmp_path):
    with pytest.raises(ValueError, match="python/object"):
        saved_model_path("flavors: !!python/object/apply:os.system ['echo pwned']\n")
    (tmp_path / "MLmodel").write_text("flavors:\n  sklearn: {}\n")
    with pytest.raises(Exception, match=r"models:/x@y holds no SavedModel tfos can find \(its flavors: \['sklearn'\]\)"):
        saved_model_in(str(tmp_path), "models:/x@y")
