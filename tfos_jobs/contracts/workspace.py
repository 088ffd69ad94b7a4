"""A TF node's (or sweep trial's) directory on its executor's local disk.

A cluster shares no disk and TensorFlow opens local paths only, so a node trains from local
copies and writes locally; the driver sends it the dataset through Spark (`cluster.driver.node_inputs`)
and the resume state over the control channel, and publishes what it hands back.

    <local root>/tfos-<run id>/
      dataset/          the dataset files the nodes on this host were sent (_meta/, train/, eval/);
                        the same path on every host, since a parameter-server worker opens the
                        files named by the chief's input function
      users/<node>      one entry per node of this host using dataset/; the last one out removes it
      <node>/           the node's own:
        backup/         resume state (Keras BackupAndRestore), fetched from the model directory
        logs/           TensorBoard event files
        saved_model/    the export, before it is published
        backup-<n>/ logs-<n>/  copies of the above on their way to the driver
        tmp/            the temporary files of its training (TensorFlow's autograph sources)

The driver names the dataset files a node gets by their place under `dataset/` (DATASET).
Nodes of one host enter and leave under a lock on the local root, so that a node leaving never
removes the root while another is entering it.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

DATASET = "dataset"


def local_root(configured: str) -> str:
    """`train.local_dir`, else the system's temporary directory on this host."""
    return configured or tempfile.gettempdir()


@dataclass(frozen=True)
class Workspace:
    root: str  # <local root>/tfos-<run id>
    node: str  # e.g. "worker-1", or "trial-007"

    @staticmethod
    def of(local_dir: str, run_id: str, node: str) -> "Workspace":
        return Workspace(os.path.join(local_root(local_dir), f"tfos-{run_id}"), node)

    @property
    def dataset(self) -> str:
        return os.path.join(self.root, DATASET)

    @property
    def own(self) -> str:
        return os.path.join(self.root, self.node)

    @property
    def backup(self) -> str:
        return os.path.join(self.own, "backup")

    @property
    def logs(self) -> str:
        return os.path.join(self.own, "logs")

    @property
    def saved_model(self) -> str:
        return os.path.join(self.own, "saved_model")

    @property
    def scratch(self) -> str:
        return os.path.join(self.own, "tmp")

    @property
    def _users(self) -> str:
        return os.path.join(self.root, "users")

    def enter(self) -> None:
        with _host_lock(os.path.dirname(self.root)):
            os.makedirs(self._users, exist_ok=True)
            open(os.path.join(self._users, self.node), "w").close()
            os.makedirs(self.own, exist_ok=True)

    def leave(self) -> None:
        """Remove the node's own files, and the whole root when no other node here uses it."""
        shutil.rmtree(self.own, ignore_errors=True)
        with _host_lock(os.path.dirname(self.root)):
            try:
                os.remove(os.path.join(self._users, self.node))
                os.rmdir(self._users)  # fails while another node of this host is still in
            except OSError:
                return
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def _host_lock(local_root: str) -> Iterator[None]:
    """An exclusive lock on the local root directory itself: it leaves no file behind, and
    every process of this host that enters or leaves a workspace under it takes the same one."""
    os.makedirs(local_root, exist_ok=True)
    fd = os.open(local_root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
