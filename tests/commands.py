"""Commands the fault tests run as a user would, each in a process group of its own: whatever a
test leaves of one (a driver that timed out, the JVMs and Python workers of a killed one) is
killed with its group when the test ends (`kill_started`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import CENSUS, ROOT

BIN = Path(sys.executable).parent
STARTED: list[subprocess.Popen] = []


def tfos_command(command: str, *overrides: str) -> list[str]:
    """`tfos COMMAND --config conf/census.toml --set ...` (a later --set wins)."""
    return [str(BIN / "tfos"), command, "--config", str(CENSUS), *[a for s in overrides for a in ("--set", s)]]


def start(cmd: list[str]) -> subprocess.Popen:
    """`cmd` in a new process group, its output captured as text; this checkout's code first on
    its path, and on its Spark workers'."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)},
                            start_new_session=True)
    STARTED.append(proc)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to `proc` and everything in its group, and wait for `proc`."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc.poll() is None:
        proc.wait(30)


def kill_started() -> None:
    while STARTED:
        kill_group(STARTED.pop())


def in_group(pgid: int, needle: str) -> list[int]:
    """The processes of process group `pgid` whose command line holds `needle` (e.g. the executor
    JVMs a command's local-cluster started: `CoarseGrainedExecutorBackend`)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            if needle in cmdline and os.getpgid(int(entry)) == pgid:
                found.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # it ended while we looked
    return found


class CpuBurners:
    """`n` processes that keep a core each busy while the block runs: a loaded machine."""

    def __init__(self, n: int):
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "CpuBurners":
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                      for _ in range(self.n)]
        return self

    def __exit__(self, *_exc: object) -> None:
        for proc in self.procs:
            kill_group(proc)
