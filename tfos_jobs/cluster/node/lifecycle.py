"""How TF nodes on executors end without leaving anything behind."""
from __future__ import annotations

import os
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


def start_reaper(watched_pid: int, workspace: Workspace) -> None:
    """A detached process that clears `workspace` if `watched_pid` dies first; it exits once the
    workspace has been left.

    When Spark cancels a task it SIGKILLs the Python worker: the node's files would be left on the executor's disk
    (the node's own process dies with its task); the reaper removes them instead."""
    subprocess.Popen(
        [sys.executable, "-m", "tfos_jobs.cluster.node.reaper", str(watched_pid), workspace.root, workspace.node],
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
