"""What the package asks of a Spark session, in a classic session and a Spark Connect client alike.

A Connect client (`SparkSession.builder.remote("sc://...")`, or `pyspark-client`) has no JVM, no SparkContext, no RDDs
and no py4j: the driver runs elsewhere. Everything the jobs need of a session beyond DataFrames goes through here: the
master and the driver's settings, files handed to the executors' Python workers (user code, a model), tags to cancel a
job by, and whether there is a SparkContext at all. Where a classic session has a direct way that works as well, it is
kept; the rest is a call on the driver (`driver_calls`), which both kinds of session make.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator

from tfos_jobs import driver_calls

_lock = threading.Lock()
_artifacts: dict[str, set[str]] = {}  # Connect session id -> names of the files added to it


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect client's session (no SparkContext behind it)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def identity(spark: Any) -> str:
    """Names what files are added to: the application (classic), or the Connect session."""
    return f"connect:{spark.session_id}" if is_connect(spark) else f"app:{spark.sparkContext.applicationId}"


def session_id(spark: Any) -> str:
    """Tells one session from another of the same application (a streaming query runs in a copy
    of the session that started it)."""
    return str(spark.session_id) if is_connect(spark) else str(spark._jsparkSession.sessionUUID())


def master(spark: Any) -> str:
    if is_connect(spark):
        return str(driver_calls.call(spark, driver_calls.CLUSTER_INFO)["master"])
    return str(spark.sparkContext.master)


class DriverConf:
    """The driver's SparkConf as a Connect client reads it, a call on the driver each `get(key, default)`: core settings
    such as spark.executor.memory, which a Connect session's runtime config does not show."""

    def __init__(self, spark: Any):
        self.spark = spark

    def get(self, key: str, default: str | None = None) -> str | None:
        value = driver_calls.call(self.spark, driver_calls.CLUSTER_CONF, key=key)
        return default if value is None else str(value)


def driver_conf(spark: Any) -> Any:
    """The driver's SparkConf (classic), or what reads it through the driver (Connect): `.get(key, default)`."""
    return DriverConf(spark) if is_connect(spark) else spark.sparkContext.getConf()


def default_parallelism(spark: Any) -> int:
    if is_connect(spark):
        return int(driver_calls.call(spark, driver_calls.CLUSTER_INFO)["default_parallelism"])
    return int(spark.sparkContext.defaultParallelism)


def executors(spark: Any) -> int:
    """Executors registered now (the driver not counted)."""
    if is_connect(spark):
        return int(driver_calls.call(spark, driver_calls.CLUSTER_INFO)["executors"])
    return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1


def shipped_files(spark: Any) -> set[str]:
    """Names of the files already handed to the executors (`add_python_file`, `add_archive`,
    --py-files)."""
    if is_connect(spark):
        with _lock:
            return set(_artifacts.get(identity(spark), ()))
    return {uri.rstrip("/").rsplit("/", 1)[-1] for uri in spark.sparkContext.listFiles}


def add_python_file(spark: Any, path: str) -> None:
    """A `.py` or `.zip` on the Python path of every later task's worker."""
    if is_connect(spark):
        spark.addArtifacts(path, pyfile=True)
        _added(spark, path)
    else:
        spark.sparkContext.addPyFile(path)


def add_archive(spark: Any, path: str) -> None:
    """A `.zip` unpacked for every later task's worker, found there as `SparkFiles.get(name)`."""
    if is_connect(spark):
        spark.addArtifacts(path, archive=True)
        _added(spark, path)
    else:
        spark.sparkContext.addArchive(path)


def _added(spark: Any, path: str) -> None:
    with _lock:
        _artifacts.setdefault(identity(spark), set()).add(os.path.basename(path))


def physical_plan(df: Any) -> str:
    """The text of a DataFrame's physical plan (its scans' pushed filters and pruned partitions)."""
    if is_connect(df.sparkSession):
        return str(df._explain_string(mode="simple"))
    return str(df._jdf.queryExecution().executedPlan().toString())


@contextlib.contextmanager
def tagged(spark: Any, tag: str) -> Iterator[None]:
    """The jobs this thread starts within the block carry `tag`: `interrupt` cancels them, and
    `driver_calls.JOB_FAILURES` finds their tasks."""
    spark.addTag(tag)
    if not is_connect(spark):  # Connect always interrupts a cancelled task's thread
        spark.sparkContext.setInterruptOnCancel(True)
    try:
        yield
    finally:
        spark.removeTag(tag)


def interrupt(spark: Any, tag: str) -> None:
    """Cancel every job carrying `tag`, in whichever thread it runs."""
    spark.interruptTag(tag)
