"""PEP 517 build backend: setuptools, plus the TFRecord data source jar inside every wheel.

A wheel carries `tfos_jobs/jars/tfos-tfrecord.jar`, compiled from `jvm/` with the Scala
compiler that pyspark ships (scripts/build_tfrecord_jar.sh, as `make setup` does), so the
jar matches that pyspark's Spark and Scala exactly. Building a wheel therefore needs pyspark
(added to the build requirements here) and a JDK. A tree that already holds a jar newer than
its Scala sources (or a jar and no sources, as a container build copies in) uses it as is.
An editable install needs neither: there `make setup` builds the jar in place.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (build_editable, build_sdist, get_requires_for_build_editable,
                                   get_requires_for_build_sdist, prepare_metadata_for_build_editable,
                                   prepare_metadata_for_build_wheel)

__all__ = ["build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable",
           "get_requires_for_build_sdist", "get_requires_for_build_wheel", "prepare_metadata_for_build_editable",
           "prepare_metadata_for_build_wheel"]

ROOT = Path(__file__).resolve().parent.parent
JAR = ROOT / "tfos_jobs" / "jars" / "tfos-tfrecord.jar"


def pyspark_requirement() -> str:
    """The project's own pyspark requirement (pyproject.toml): the jar is compiled against the
    Spark the package runs on."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    found = [d for d in dependencies if d.replace(" ", "").lower().startswith(("pyspark>", "pyspark=", "pyspark<", "pyspark~"))]
    if len(found) != 1:
        raise RuntimeError(f"pyproject.toml must name pyspark exactly once in [project] dependencies, found {found}")
    return found[0]


def get_requires_for_build_wheel(config_settings=None):
    extra = [pyspark_requirement()] if _jar_needed() else []
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if _jar_needed():
        _build_jar()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def _jar_needed() -> bool:
    sources = list((ROOT / "jvm").rglob("*.scala"))
    if JAR.exists():
        return bool(sources) and JAR.stat().st_mtime < max(p.stat().st_mtime for p in sources)
    if not sources:
        raise RuntimeError(f"no {JAR.name} and no Scala sources under {ROOT / 'jvm'} to build it from: "
                           "the sdist or checkout is incomplete")
    return True


def _build_jar() -> None:
    script = ROOT / "scripts" / "build_tfrecord_jar.sh"
    env = {**os.environ, "PYTHONNOUSERSITE": "1"}
    subprocess.run(["bash", str(script), sys.executable, str(JAR)], check=True, env=env, cwd=ROOT)
