"""The executors' Python worker daemon: Spark's own (`pyspark.daemon`), started with the
environment's installed pyspark ahead of the copy Spark zips (`spark.python.daemon.module`,
which the package's sessions and its Spark Connect server set).

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on its Python workers' path. Python keeps no
compiled bytecode for modules it imports from a zip, so every new Python worker compiled pyspark's worker, serializer
and SQL modules from source: 0.8 s of imports where the installed, compiled copy takes 0.4 s, paid by every TF node's
task and by its node's own process on a fresh executor (docs/tuning.md, item 14d). Where the environment holds the same
pyspark as the zip (a pip-installed Spark: the package's venv, image and environment archives), the zips move behind it;
another version, or none, leaves the path as Spark made it.

Nothing here may import pyspark before the path is settled: this module is the daemon's
`__main__` (`python -m tfos_jobs.python_daemon pyspark.worker`).
"""
from __future__ import annotations

import importlib.machinery
import os
import re
import sys
import zipfile
from typing import Sequence

MODULE = "tfos_jobs.python_daemon"  # what spark.python.daemon.module names: this module
SETTING = "spark.python.daemon.module"
SPARK_ZIP = re.compile(r"pyspark\.zip|py4j-[\w.]+-src\.zip")  # $SPARK_HOME/python/lib's
VERSION = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.MULTILINE)


def installed_first(path: Sequence[str]) -> list[str]:
    """`path` with Spark's zips of pyspark and py4j last, when the rest of `path` holds the same
    pyspark version as the zip; else `path` as it is."""
    zips = [p for p in path if SPARK_ZIP.fullmatch(os.path.basename(p))]
    spark_zip = next((p for p in zips if os.path.basename(p) == "pyspark.zip"), None)
    if spark_zip is None:
        return list(path)
    rest = [p for p in path if p not in zips]
    if (installed := _installed_version(rest)) is None or installed != _zipped_version(spark_zip):
        return list(path)
    return [*rest, *zips]


def _installed_version(path: list[str]) -> str | None:
    spec = importlib.machinery.PathFinder.find_spec("pyspark", [p for p in path if not p.endswith(".zip")])
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py"), encoding="utf-8") as f:
            return _version(f.read())
    except OSError:
        return None


def _zipped_version(spark_zip: str) -> str | None:
    try:
        with zipfile.ZipFile(spark_zip) as z:
            return _version(z.read("pyspark/version.py").decode("utf-8"))
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _version(source: str) -> str | None:
    found = VERSION.search(source)
    return found.group(1) if found else None


def main() -> None:
    sys.path[:] = installed_first(sys.path)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
