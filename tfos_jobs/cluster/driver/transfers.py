"""Files a node hands to the driver for the run's storage, and resume state it asks for.

A node writes on its own local disk; what must outlive it (the SavedModel, the resume state, TensorBoard logs) arrives
here in chunks over the control channel, is staged on the driver's disk and published to the run's directory through
`storage.Storage`: a REPLACE target whole or absent, a MERGE target file by file. Targets are names
(control_channel.TARGETS) mapped to the run's directories here, so a node can name nothing outside them.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from typing import TypeGuard

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.storage import Storage


class Transfers:
    """`dirs`: target name -> its directory on storage (qualified)."""

    def __init__(self, storage: Storage, dirs: dict[str, str]):
        self.storage, self.dirs = storage, dict(dirs)
        self.staging = tempfile.mkdtemp(prefix="tfos-staging-")
        self._lock = threading.Lock()

    def _target(self, name: object) -> str:
        if name not in self.dirs:
            raise cc.ControlError(f"unknown transfer target {name!r}")
        return str(name)

    def put(self, target: object, path: object, offset: object, data: object) -> None:
        name, rel = self._target(target), cc.relative_path(path)
        if not _natural(offset):
            raise cc.ControlError(f"bad offset {offset!r}")
        chunk = cc.decode_chunk(data)
        local = os.path.join(self.staging, name, rel)
        with self._lock:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "r+b" if os.path.exists(local) else "wb") as fh:
                fh.seek(offset)
                fh.write(chunk)

    def publish(self, target: object, files: object) -> None:
        """Publish the staged copy of `target` once it holds exactly `files` ({path: bytes})."""
        name = self._target(target)
        if not isinstance(files, dict):
            raise cc.ControlError("publish needs the files it names")
        local = os.path.join(self.staging, name)
        with self._lock:
            staged = _tree(local)
            expected = {cc.relative_path(p): n for p, n in files.items()}
            if staged != expected:
                missing = sorted(set(expected) - set(staged)) or sorted(p for p in expected if staged.get(p) != expected[p])
                raise ValueError(f"the upload of {name} is incomplete (e.g. {missing[:3]}); nothing was published")
            os.makedirs(local, exist_ok=True)
            if cc.TARGETS[name] == cc.REPLACE:
                self.storage.replace_dir(local, self.dirs[name])
            else:
                self.storage.merge_dir(local, self.dirs[name])
            shutil.rmtree(local, ignore_errors=True)

    def listing(self, target: object) -> dict[str, int]:
        return dict(self.storage.tree(self.dirs[self._target(target)]))

    def get(self, target: object, path: object, offset: object, length: object) -> str:
        name, rel = self._target(target), cc.relative_path(path)
        if not (_natural(offset) and _natural(length)):
            raise cc.ControlError("bad offset or length")
        return cc.encode_chunk(self.storage.read_bytes(f"{self.dirs[name]}/{rel}", offset, min(length, cc.CHUNK)))

    def handle(self, kind: str, message: dict) -> object:
        """The reply to a PUT, PUBLISH, LIST or GET message."""
        if kind == cc.PUT:
            self.put(message.get("target"), message.get("path"), message.get("offset"), message.get("data"))
            return None
        if kind == cc.PUBLISH:
            self.publish(message.get("target"), message.get("files"))
            return None
        if kind == cc.LIST:
            return self.listing(message.get("target"))
        return self.get(message.get("target"), message.get("path"), message.get("offset"), message.get("length"))

    def close(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


FILE_MESSAGES = (cc.PUT, cc.PUBLISH, cc.LIST, cc.GET)


def _natural(value: object) -> TypeGuard[int]:
    """An offset or length a message may carry: an int (not a bool), 0 or more."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tree(root: str) -> dict[str, int]:
    out = {}
    for top, _, names in os.walk(root):
        for name in names:
            full = os.path.join(top, name)
            out[os.path.relpath(full, root).replace(os.sep, "/")] = os.path.getsize(full)
    return out


def model_dir_targets(model_dir: ModelDir) -> dict[str, str]:
    """Where each file target a node publishes (control_channel.TARGETS) lands in a model directory."""
    return {cc.SAVED_MODEL: model_dir.saved_model, cc.BACKUP: model_dir.backup, cc.LOGS: model_dir.logs}
