"""Where a served model is (a model directory or its SavedModel on any filesystem the session
reaches, or a registered version), and what is read there without loading the model: its
feature spec, its version. Errors name the setting the caller read the model from."""
from __future__ import annotations

import hashlib
from typing import Callable

from pyspark.sql import SparkSession

from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.mlflow_layout import MLMODEL, saved_model_path
from tfos_jobs.contracts.model_dir import SAVED_MODEL, ModelDir
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.storage import Storage, StorageError, named

# (a model reference, the setting that names it) -> the reference itself when it is a path, else the local
# copy of the registered version it names (`models:/census@champion`; MLflow's: tracking.registry.resolver).
Resolver = Callable[[str, str], str]


def locate_saved_model(storage: Storage, model_dir: str, *, setting: str, resolve: Resolver | None = None) -> str:
    """The SavedModel directory, qualified: `model_dir` itself or its `saved_model/`, or the
    local copy of the registered version `resolve` finds for it. Refuses anything else, naming `setting`."""
    if resolve is not None:
        model_dir = resolve(model_dir, setting)
    if not model_dir or "\0" in model_dir:
        raise ConfigError(f"{setting}: {model_dir!r} is not a valid path")
    with named(setting, model_dir):
        path = storage.qualify(model_dir)
        for candidate in (path, ModelDir(path).saved_model):
            if storage.exists(f"{candidate}/{contract.SAVED_MODEL_FILE}"):
                return candidate
        flavour = _mlflow_saved_model(storage, path)
        if flavour is not None:
            return flavour
        exists = storage.exists(path)
    if not exists:
        raise ConfigError(f"{setting}: model directory {model_dir!r} does not exist")
    raise ConfigError(f"{setting}: {model_dir!r} holds no SavedModel (no {contract.SAVED_MODEL_FILE} in it or in its "
                      f"{SAVED_MODEL}/)")


def _mlflow_saved_model(storage: Storage, path: str) -> str | None:
    """The SavedModel of an MLflow model at `path` (as `mlflow.tensorflow.save_model` or tfos wrote it), by its
    MLmodel file (`tracking.mlflow_model`), when it is there. None for anything else."""
    if not storage.exists(f"{path}/{MLMODEL}"):
        return None
    try:
        relative = saved_model_path(storage.read_text(f"{path}/{MLMODEL}"))
    except ValueError:
        return None
    if isinstance(relative, list) or "/.." in f"/{relative}" or relative.startswith("/"):
        return None
    found = f"{path}/{relative.strip('/')}"
    return found if storage.exists(f"{found}/{contract.SAVED_MODEL_FILE}") else None


def read_spec_asset(storage: Storage, export_dir: str) -> FeatureSpec:
    """The feature spec in a SavedModel's assets, read where the model is."""
    path = contract.spec_asset(export_dir)
    try:
        return FeatureSpec.from_json(storage.read_text(path))
    except StorageError:
        raise ConfigError(f"{export_dir!r} has no {path[len(export_dir) + 1:]}: it was not exported by "
                          "tfos train") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path!r} is not a valid feature spec: {e}") from None


def served_spec(spark: SparkSession, model_dir: str, *, setting: str, resolve: Resolver | None = None) -> FeatureSpec:
    """The feature spec of the model in `model_dir`, wherever it is, without loading the model."""
    storage = Storage(spark)
    return read_spec_asset(storage, locate_saved_model(storage, model_dir, setting=setting, resolve=resolve))


def served_version(spark: SparkSession, model_dir: str, *, setting: str, resolve: Resolver | None = None) -> str:
    """What `register` would serve for `model_dir` now (the SavedModel's place and version), read
    without loading it: a new export, or an alias moved to another version, changes it."""
    storage = Storage(spark)
    export_dir = locate_saved_model(storage, model_dir, setting=setting, resolve=resolve)
    with named(setting, model_dir):
        return version_of(storage, export_dir)


def version_of(storage: Storage, export_dir: str) -> str:
    """Where the model is and when its graph was written: a new export is a new version."""
    written = storage.version(f"{export_dir}/{contract.SAVED_MODEL_FILE}")
    return hashlib.sha256(f"{export_dir}|{written}".encode()).hexdigest()[:16]
