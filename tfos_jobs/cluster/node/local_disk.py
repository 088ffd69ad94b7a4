"""A full local disk under a node's workspace, told as what to change rather than as an errno.

A node keeps its dataset shard, its resume state and its export on its executor's disk (`contracts.workspace`); when
that disk fills, the error surfaces anywhere (Python's file calls, TensorFlow's checkpoint writer) and on whichever host
the node happened to run. The user needs the host, the directory and the setting that moves it.
"""
from __future__ import annotations

import errno
import shutil
import socket

from tfos_jobs.contracts.workspace import local_root

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_MESSAGES = ("No space left on device", "Disk quota exceeded")
SETTING = "train.local_dir"


def is_full(error: BaseException) -> bool:
    """Whether `error`, or one it was raised from, says the disk is full."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL_ERRNOS:
            return True
        if any(text in str(seen) for text in FULL_MESSAGES):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def full_message(local_dir: str) -> str:
    """One line: the host, the directory, its disk's size and the setting to change. (The free
    space is not shown: by the time this is said the node's files are gone.)"""
    root = local_root(local_dir)
    setting = f"{SETTING} = {local_dir!r}" if local_dir else f"{SETTING} unset: the temporary directory"
    try:
        size = f"a {_size(shutil.disk_usage(root).total)} disk; "
    except OSError:
        size = ""
    return (f"LocalDiskFull: no space left on host {socket.gethostname()} in {root} ({size}{setting}); a node keeps "
            f"its dataset shard, resume state and export there: set {SETTING} to a larger disk on every executor")


def explained(error: BaseException, trace: str, local_dir: str) -> str:
    """A node's traceback for the driver, ending (the line the driver shows) with what to change
    when the disk was full."""
    return f"{trace.rstrip()}\n{full_message(local_dir)}\n" if is_full(error) else trace


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
