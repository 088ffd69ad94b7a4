"""A model on any filesystem, fetched once to the driver and shipped once to every executor.

The driver copies the SavedModel from wherever it lives (local, HDFS, S3, ...) to its own disk, keyed by the model's
version (`model_location.version_of`), and adds it to the application as an archive named after that version
(`SparkContext.addArchive`; from a Spark Connect client, to the session as an artifact): each executor fetches and
unpacks it once, from the driver, whatever filesystems the executors reach; a Python worker loads its local copy
(`local_copy`). A model rewritten in place gets a new version, hence a new archive; an unchanged one is not shipped
again."""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from typing import Any

from tfos_jobs import sessions
from tfos_jobs.storage import Storage

_lock = threading.Lock()
_cache: dict[str, str] = {}  # version -> local copy on the driver
_shipped: set[tuple[str, str]] = set()  # (application or Connect session, archive name) added to it


@dataclass(frozen=True)
class ShippedModel:
    """What an executor needs to find its copy: plain values."""

    archive: str  # the archive's name in the application (SparkFiles)
    version: str


def fetch(storage: Storage, export_dir: str, version: str) -> str:
    """The model's copy on the driver's disk (made once per version)."""
    with _lock:
        if version in _cache and os.path.isdir(_cache[version]):
            return _cache[version]
        local = storage.on_this_host(export_dir)
        if local is None:
            local = os.path.join(_cache_root(), version)
            storage.download(export_dir, local)
        _cache[version] = local
        return local


def archive_name(version: str) -> str:
    """The name a model's version is shipped under (`SparkFiles`), on the driver and the executors alike."""
    return f"tfos-model-{version}.zip"


def ship(spark: Any, local_copy: str, version: str) -> ShippedModel:
    """Add the model to the application (a Connect client's session) as `archive_name(version)`, once."""
    name = archive_name(version)
    with _lock:
        if (sessions.identity(spark), name) not in _shipped:
            archive = os.path.join(_cache_root(), name)
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
                for top, _, files in os.walk(local_copy):
                    for f in files:
                        full = os.path.join(top, f)
                        zf.write(full, os.path.relpath(full, local_copy))
            sessions.add_archive(spark, archive)
            _shipped.add((sessions.identity(spark), name))
    return ShippedModel(name, version)


def local_copy(model: ShippedModel) -> str:
    """On an executor (or the driver): the unpacked copy of a shipped model."""
    from pyspark import SparkFiles

    return SparkFiles.get(model.archive)


@functools.cache
def _cache_root() -> str:
    root = tempfile.mkdtemp(prefix="tfos-models-")
    atexit.register(shutil.rmtree, root, True)
    return root
