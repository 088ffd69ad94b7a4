"""Peak resident memory of the driver and of each executor while a call runs.

The driver is this Python process and the JVM it started; an executor is its JVM with the Python
processes under it (the daemon, the workers, a TF node). On `local-cluster` masters the executor
JVMs are children of the driver's, so one walk of /proc from this process finds them all. Read
from /proc, so Linux only; elsewhere `Peaks.usable` is False and the figures are left out."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Callable

from benchmarks import cpu
from tfos_jobs.cluster.node import spark_executor


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
DRIVER = spark_executor.DRIVER  # the group of the driver's processes


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _executor_id(pid: int) -> str | None:
    """`executor N` for an executor JVM, else None."""
    found = spark_executor.jvm_executor_id(pid)
    return None if found is None else f"executor {found}"


def executor_of(pid: int) -> int:
    """The executor JVM above process `pid` (a TF node's Python, say)."""
    while pid > 1:
        if spark_executor.jvm_executor_id(pid) is not None:
            return pid
        pid = spark_executor.parent(pid)
    raise LookupError("no executor JVM above the process")


def groups(root: int) -> dict[str, int]:
    """Bytes resident now, per group: the driver (`root` and what is under it outside any
    executor) and each executor (its JVM and everything under it)."""
    tree = cpu.children()
    out: dict[str, int] = {DRIVER: 0}
    todo = [(root, DRIVER)]
    while todo:
        pid, group = todo.pop()
        if group == DRIVER:
            group = _executor_id(pid) or DRIVER
        out[group] = out.get(group, 0) + _rss(pid)
        todo.extend((child, group) for child in tree.get(pid, []))
    return out


@dataclass
class Peaks:
    """The largest resident size each group reached while `around` ran, sampled every `every` s."""

    every: float = 0.5
    peak: dict[str, int] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return os.path.isdir(f"/proc/{os.getpid()}")

    def around(self, fn: Callable[[], object]) -> object:
        if not self.usable:
            return fn()
        done = threading.Event()

        def sample() -> None:
            while True:
                for group, size in groups(os.getpid()).items():
                    self.peak[group] = max(self.peak.get(group, 0), size)
                if done.wait(self.every):
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            return fn()
        finally:
            done.set()
            sampler.join()
