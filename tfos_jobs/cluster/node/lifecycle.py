"""How TF nodes on executors end without leaving anything behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.contracts.workspace import Workspace

POLL_SECONDS = 0.5
TIMEOUT = "timeout"


def wait_until_done(link: DriverLink, max_seconds: float) -> str:
    """Block a serving-only node until the driver says the run ended (its status), or TIMEOUT: a node never outlives
    `max_seconds`. A driver that went away ends the wait with the control channel's error."""
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        status = link.status()
        if status is not None:
            return status
        time.sleep(POLL_SECONDS)
    return TIMEOUT


def start_reaper(watched_pid: int, targets: list[int], workspace: Workspace | None = None) -> None:
    """A detached process that kills `targets` and clears `workspace` if `watched_pid` dies first;
    it exits once the targets are gone and the workspace has been left.

    When Spark cancels a task it SIGKILLs the Python worker: the helper processes it forked (TFoS's manager server)
    would be orphaned and its files left on the executor's disk; the reaper ends and removes them instead. The task's
    reaper clears the workspace; a node process's reaper only ends its helpers (the task may run another node process in
    the same workspace after it)."""
    subprocess.Popen(
        [sys.executable, "-m", "tfos_jobs.cluster.node.reaper", str(watched_pid),
         workspace.root if workspace else "", workspace.node if workspace else "", *map(str, targets)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )


def alive(pid: int) -> bool:
    """True while the process runs; a zombie (dead, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def kill(pids: list[int], grace: float = 3.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
