"""Which Spark executor a TF node runs on, as Spark names it: the ID its UI, its logs,
`SparkContext.killExecutors` and a Kubernetes pod's `spark-exec-id` label use. TensorFlowOnSpark's
own `executor_id` is the node's partition, which says nothing of where it ran."""
from __future__ import annotations

import os
from pathlib import Path

DRIVER = "driver"  # Spark's name for the driver's JVM, where local mode runs its tasks
ENV = "SPARK_EXECUTOR_ID"  # set in an executor pod's environment on Kubernetes
FLAG = b"--executor-id"  # on every executor JVM's command line (standalone, YARN, Kubernetes)
MAX_DEPTH = 16


def executor_id(pid: int | None = None) -> str:
    """The executor whose JVM `pid` (this process by default) descends from: Python workers
    and the processes they start are its children. DRIVER when no ancestor is an executor."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    current = os.getpid() if pid is None else pid
    for _ in range(MAX_DEPTH):
        found = jvm_executor_id(current)
        if found is not None:
            return found
        try:
            current = parent(current)
        except (OSError, ValueError, IndexError):
            return DRIVER
        if current <= 1:
            return DRIVER
    return DRIVER


def jvm_executor_id(pid: int) -> str | None:
    """The executor's ID when process `pid` is an executor's JVM, else None (Linux's /proc)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return None
    return args[args.index(FLAG) + 1].decode() if FLAG in args[:-1] else None


def parent(pid: int) -> int:
    """The parent of process `pid` (Linux's /proc): a TF node's process is a few levels below its executor's JVM."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
