"""How TF nodes on executors start, report and end, without leaving anything behind.

A run has a directory `<model_dir>/_run/<run_id>/` on storage every node and the driver see:
  nodes/<role>-<index>.json   what each node was given (executor, pid, GPUs)
  nodes/<role>-<index>.error  the traceback of a node that failed
  done                        written by the chief when it finishes (ok or not), or by the
                              driver when it gives up; parameter servers and PS workers,
                              which only serve, return when they see it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

POLL_SECONDS = 0.5


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def write_json(path: str, data: dict) -> None:
    gfile = _gfile()
    gfile.makedirs(os.path.dirname(path))
    tmp = f"{path}.tmp-{os.getpid()}"
    with gfile.GFile(tmp, "w") as fh:
        fh.write(json.dumps(data))
    gfile.rename(tmp, path, overwrite=True)


def write_text(path: str, text: str) -> None:
    gfile = _gfile()
    gfile.makedirs(os.path.dirname(path))
    with gfile.GFile(path, "w") as fh:
        fh.write(text)


def mark_done(run_dir: str, status: str) -> None:
    write_text(f"{run_dir}/done", status)


def wait_until_done(run_dir: str, max_seconds: float) -> str:
    """Block a serving-only node until the run ends; a node never outlives `max_seconds`."""
    gfile = _gfile()
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        if gfile.exists(f"{run_dir}/done"):
            with gfile.GFile(f"{run_dir}/done") as fh:
                return fh.read()
        time.sleep(POLL_SECONDS)
    return "timeout"


def start_reaper(watched_pid: int, targets: list[int]) -> None:
    """A detached process that kills `targets` if `watched_pid` dies first.

    When Spark cancels a task it SIGKILLs the Python worker, and the helper processes it
    forked (TFoS's manager server) would be orphaned; the reaper ends them instead."""
    if not targets:
        return
    subprocess.Popen(
        [sys.executable, "-m", "tfos_jobs.executor.reaper", str(watched_pid), *map(str, targets)],
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
