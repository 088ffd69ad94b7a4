"""The Python the executors run: it must import this package, or every task of the first job
that runs its code fails with `No module named 'tfos_jobs'`; each job checks it first.

Spark starts Python workers with `spark.pyspark.python` (through spark-submit), else `PYSPARK_PYTHON`, else `python3`
from PATH: in a notebook started as `.venv/bin/python`, with nothing activated, another Python. On a local master the
workers run on this host, so they are given this very interpreter; on any other master (and from a Spark Connect client,
whose server chose them) a one-task job asks a worker to import the package, once per application.
"""
from __future__ import annotations

import os
import re
import sys
import threading
from typing import Any

from pyspark.sql import SparkSession

from tfos_jobs import sessions
from tfos_jobs.errors import ConfigError

PYTHON_SETTING = "spark.pyspark.python"
PYTHON_VARIABLE = "PYSPARK_PYTHON"
LOCAL_MASTER = re.compile(r"local(\[[^]]*\]|-cluster\[[^]]*\])?")  # local, local[N], local[N,F], local-cluster[N,C,MB]
MODULES = ("tfos_jobs", "udfs")  # what a worker imports to run the prediction function and the jobs

_lock = threading.Lock()
_checked: set[str] = set()  # applications (Connect sessions) whose workers imported MODULES


IN_DRIVER_MASTER = re.compile(r"local(\[[^]]*\])?")  # local, local[N], local[N,F]: the executor is the driver's JVM


def executors_in_driver(master: str) -> bool:
    """Whether the master runs its executor inside the driver's JVM (its class path is the driver's)."""
    return IN_DRIVER_MASTER.fullmatch(master.strip()) is not None


def is_local(master: str) -> bool:
    """Whether executors run on this host (local and local-cluster masters)."""
    return LOCAL_MASTER.fullmatch(master.strip()) is not None


def check_worker_python(spark: SparkSession) -> str:
    """Make sure this application's Python workers import tfos_jobs and udfs (`_choose`, else a
    probe once per application); returns their interpreter. Raises ConfigError naming
    `spark.pyspark.python` and `tfos pack-env` when a worker cannot import the package."""
    connect = sessions.is_connect(spark)
    with _lock:  # sc.pythonExec is read whenever a UDF or an RDD function is wrapped for the workers
        python = "(the Spark Connect server's)" if connect else _choose(spark)
        if (python == sys.executable and is_local(sessions.master(spark))) or sessions.identity(spark) in _checked:
            return python
        failure = _probe(spark)
        if failure and connect:
            raise ConfigError(
                f"the executors' Python workers of the Spark Connect server cannot import {' and '.join(MODULES)}: "
                f"{failure}. Install tfos-jobs where the server's executors run, or start the server with "
                f"{PYTHON_SETTING} naming a Python that has it (docs/operations.md, Spark Connect)")
        if failure:
            raise ConfigError(
                f"the executors' Python workers ({python!r}) cannot import {' and '.join(MODULES)}: {failure}. "
                f"Set {PYTHON_SETTING} (or {PYTHON_VARIABLE} before the session starts) to a Python that has tfos-jobs "
                "installed on every executor, or ship this environment: `tfos pack-env tfos-env.tar.gz`, then "
                f"--archives tfos-env.tar.gz#env with {PYTHON_SETTING}=./env/bin/python (docs/deploy.md)")
        _checked.add(sessions.identity(spark))
        return python


def _choose(spark: SparkSession) -> str:
    """The workers' interpreter as the SparkContext is given it: `spark.pyspark.python`, else on a
    local master with no PYSPARK_PYTHON this process's own (no probe needed)."""
    sc = spark.sparkContext
    if setting := sc.getConf().get(PYTHON_SETTING):
        sc.pythonExec = setting  # pyspark reads it only through spark-submit, not from a session's builder
    elif is_local(sessions.master(spark)) and not os.environ.get(PYTHON_VARIABLE):
        sc.pythonExec = sys.executable
    return sc.pythonExec


def _probe(spark: SparkSession) -> str:
    """What a Python worker says when it imports MODULES: "" when it can. The function sent is local
    (pickled by value: a worker without the package runs it) and returns its failure (a raising task is retried)."""
    modules = MODULES

    def imports(batches: Any) -> Any:
        import importlib

        import pyarrow as pa

        for _ in batches:
            pass
        answer = ""
        try:
            for name in modules:
                importlib.import_module(name)
        except Exception as e:  # any failure to import is the answer
            answer = f"{type(e).__name__}: {e}"
        yield pa.RecordBatch.from_pydict({"failure": [answer]})

    try:
        return spark.range(0, 1, 1, 1).mapInArrow(imports, "failure string").collect()[0]["failure"]
    except Exception as e:  # the worker did not start at all (no such interpreter, no pyspark in it)
        lines = [line for line in str(e).splitlines() if "Error" in line or "Exception" in line]
        return (lines[-1] if lines else str(e).splitlines()[0]).strip()
