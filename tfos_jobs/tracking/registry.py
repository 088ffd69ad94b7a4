"""Registered models: `models:/NAME@alias`, `models:/NAME/3` or `models:/NAME/latest`, resolved on
the driver to a local copy of that version's SavedModel, and new versions registered.

A version's files never change, so each is downloaded once per driver process."""
from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable

from tfos_jobs.errors import ConfigError
from tfos_jobs.tracking.mlflow_model import saved_model_in
from tfos_jobs.tracking.params import redact

PREFIX = "models:/"
_REF = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/@]+)|/(?P<version>\d+|latest))$")
_lock = threading.Lock()
_root: list[str] = []


def is_registered(uri: str) -> bool:
    return uri.startswith(PREFIX)


@dataclass(frozen=True)
class ModelRef:
    name: str
    alias: str | None = None
    version: str | None = None  # a number, or "latest"

    @staticmethod
    def parse(uri: str, setting: str) -> "ModelRef":
        m = _REF.match(uri)
        if not m:
            raise ConfigError(f"{setting}: {uri!r} is not a registered model URI; write models:/NAME@alias, "
                              "models:/NAME/3 or models:/NAME/latest")
        return ModelRef(m["name"], m["alias"], m["version"])


def resolver(tracking_uri: str | None) -> Callable[[str, str], str]:
    """What serving (`udfs.register`) resolves model references with: a registered model URI becomes the local copy of
    its version at `tracking_uri` (else MLFLOW_TRACKING_URI); a path stays as it is."""

    def resolve_reference(reference: str, setting: str) -> str:
        return resolve(reference, tracking_uri, setting) if is_registered(reference) else reference

    return resolve_reference


def client(tracking_uri: str | None):
    from mlflow import MlflowClient

    from tfos_jobs.tracking.run_logger import quiet_mlflow

    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    quiet_mlflow()
    return MlflowClient(tracking_uri=tracking_uri or None, registry_uri=tracking_uri or None)


def resolve(uri: str, tracking_uri: str | None, setting: str = "predict.model") -> str:
    """The local directory of the SavedModel that `uri` names (downloaded once per version)."""
    ref = ModelRef.parse(uri, setting)
    registry = client(tracking_uri)
    where = redact(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "MLflow's default store"))
    version = _version(registry, ref, uri, setting, where)
    store = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    key = hashlib.sha256(f"{store}|{ref.name}|{version.version}".encode()).hexdigest()[:16]
    with _lock:
        local = os.path.join(_cache_root(), key)
        if not os.path.isdir(local):
            import mlflow.artifacts

            partial = f"{local}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            try:
                source = registry.get_model_version_download_uri(ref.name, version.version)
                mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=partial,
                                                    tracking_uri=tracking_uri or None)
            except Exception as e:
                raise ConfigError(f"{setting}: cannot download {uri} (version {version.version}) from {where}: "
                                  f"{_first_line(e)}") from None
            os.rename(partial, local)
    return saved_model_in(_model_root(local), f"{uri} (version {version.version})")


def _model_root(local: str) -> str:
    """download_artifacts puts a directory's files under dst_path, or the directory itself in it."""
    from tfos_jobs.contracts.mlflow_layout import MLMODEL

    if os.path.isfile(os.path.join(local, MLMODEL)):
        return local
    inner = [os.path.join(local, d) for d in os.listdir(local) if os.path.isfile(os.path.join(local, d, MLMODEL))]
    return inner[0] if inner else local


def _version(registry: Any, ref: ModelRef, uri: str, setting: str, where: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        if ref.alias:
            return registry.get_model_version_by_alias(ref.name, ref.alias)
        if ref.version == "latest":
            versions = registry.search_model_versions(f"name = '{ref.name}'")
            if not versions:
                raise ConfigError(f"{setting}: registered model {ref.name!r} has no version in {where}")
            return max(versions, key=lambda v: int(v.version))
        return registry.get_model_version(ref.name, ref.version)
    except MlflowException as e:
        if e.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise ConfigError(f"{setting}: cannot resolve {uri} at {where}: {_first_line(e)}") from None
        raise ConfigError(f"{setting}: {uri} does not exist in {where}: {_known(registry, ref)}") from None
    except ConfigError:
        raise
    except Exception as e:  # the server cannot be reached
        raise ConfigError(f"{setting}: cannot resolve {uri}: the model registry at {where} did not answer "
                          f"({_first_line(e)})") from None


def _known(registry: Any, ref: ModelRef) -> str:
    """What is there instead, for the error."""
    try:
        model = registry.get_registered_model(ref.name)
    except Exception:
        return f"no registered model named {ref.name!r}"
    aliases = sorted(getattr(model, "aliases", {}) or {})
    versions = sorted(int(v.version) for v in registry.search_model_versions(f"name = '{ref.name}'"))
    return f"model {ref.name!r} has versions {versions} and aliases {aliases}"


def register_version(registry: Any, name: str, source: str, run_id: str | None, alias: str,
                     log: Callable[[str], None]) -> str:
    """A new version of `name` (created if new) from the model at `source`; `alias` moved to it."""
    from mlflow.exceptions import MlflowException

    try:
        registry.create_registered_model(name)
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = registry.create_model_version(name, source, run_id=run_id).version
    if alias:
        registry.set_registered_model_alias(name, alias, version)
    uri = f"{PREFIX}{name}@{alias}" if alias else f"{PREFIX}{name}/{version}"
    log(f"registered model {name!r} version {version}{f' (alias {alias})' if alias else ''}: {uri}")
    return str(version)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return redact(text.splitlines()[0] if text else type(e).__name__)[:300]


def _cache_root() -> str:
    if not _root:
        _root.append(tempfile.mkdtemp(prefix="tfos-registry-"))
        atexit.register(shutil.rmtree, _root[0], True)
    return _root[0]
