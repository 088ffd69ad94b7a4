"""CPU seconds of the Spark JVM, of its Python workers and of this driver process around a call.

Wall time says how far a ratio is from its goal; CPU time says where the time goes (for P4:
Spark's data path vs the model). Read from /proc, so Linux only; elsewhere `Meter.usable` is
False and the figures are left out. Python workers are reused between tasks, so their
counters survive from one query to the next."""
from __future__ import annotations

import os
import time
from typing import Callable

from pyspark.sql import SparkSession

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()  # fields after the command name
    except OSError:
        return None


def _seconds(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICK if fields else 0.0  # utime + stime


def children() -> dict[int, list[int]]:
    """Every process's children, by parent pid, from /proc."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields:
                out.setdefault(int(fields[1]), []).append(int(name))
    return out


def _descendants(root: int) -> list[int]:
    tree = children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in tree.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


class Meter:
    """Samples the JVM that `spark` runs on (driver and, in local mode, executors) and the
    Python processes under it (daemon and workers)."""

    def __init__(self, spark: SparkSession):
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        self.jvm = proc.pid if proc is not None else None
        self.usable = self.jvm is not None and os.path.isdir(f"/proc/{self.jvm}")

    def sample(self) -> dict[str, float]:
        workers = _descendants(self.jvm) if self.usable else []
        return {
            "jvm": _seconds(self.jvm) if self.usable else 0.0,
            "python workers": sum(_seconds(p) for p in workers),
            "driver": time.process_time(),
        }

    def around(self, fn: Callable[[], object]) -> tuple[float, dict[str, float]]:
        """(wall seconds, CPU seconds per process group) of one call."""
        before = self.sample()
        started = time.perf_counter()
        fn()
        wall = time.perf_counter() - started
        after = self.sample()
        return wall, {k: after[k] - before[k] for k in before}
