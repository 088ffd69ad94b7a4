"""Distributed TensorFlow on Apache Spark: prepare, train, serve and sweep from one feature spec.

The Python API is `tfos_jobs.api` (docs/python_api.md); `import tfos_jobs` itself stays light:
the API's names below load Spark and the jobs on first use only.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = ("api", "TrainResult", "SweepResult", "DatasetManifest")


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'tfos_jobs' has no attribute {name!r}")
    api = importlib.import_module("tfos_jobs.api")
    return api if name == "api" else getattr(api, name)
