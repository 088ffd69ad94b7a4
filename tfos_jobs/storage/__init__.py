"""Files on any filesystem the Spark session reaches, from the driver.

A cluster shares no disk, and TensorFlow opens only local paths (and gs://), so every dataset, model directory, sweep
directory and output path goes through here on the driver: local paths (`file:` or a relative path while Hadoop's
default filesystem is local) with Python's own file calls, the rest (hdfs://, s3a://, abfs://, gs://, viewfs://, ...)
through Hadoop's FileSystem with the session's Hadoop configuration, so the credentials and settings Spark already has
apply.

Executors never use this: TF nodes get their inputs through Spark (`cluster.driver.node_inputs`) and hand their outputs
to the driver over the control channel, which publishes them here.

A Spark Connect client has no JVM and its disk is not the cluster's: every path, `file:` ones too, goes through the
driver there (`storage.driver_fs`), as Spark itself reads them.

Publishing is whole or absent (`swap_into`, for every directory the package publishes, datasets included): a directory
is written beside its target and renamed into place (on object stores, whose renames copy, "absent" holds until the copy
ends)."""
from __future__ import annotations

import os
import shutil
import uuid
from typing import TYPE_CHECKING, Protocol

from tfos_jobs import sessions
from tfos_jobs.storage.driver_fs import DriverFS
from tfos_jobs.storage.errors import StorageError, named, reason, translated
from tfos_jobs.storage.hadoop import HadoopFS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["HadoopFS", "Storage", "StorageError", "left_staging", "named", "reason", "readable", "restore_aside",
           "staging_beside", "swap_into", "translated"]

FileSystem = HadoopFS | DriverFS  # Hadoop's FileSystem from a classic session's JVM, or through the driver


def filesystem(spark: SparkSession) -> FileSystem:
    """Hadoop's FileSystem for `spark`: through its JVM (classic) or its driver (Spark Connect)."""
    return DriverFS(spark) if sessions.is_connect(spark) else HadoopFS(spark)


class Storage:
    """Driver-side file operations on qualified paths (`qualify` first): local ones with
    Python, the rest with `HadoopFS`. Every failure is a `StorageError` in plain words.
    Without a session (`spark=None`) only local paths can be used.

    `Storage.as_spark_sees(spark)` takes every path, local ones too, through Hadoop's
    FileSystem: for directories Spark's own writers fill (prepare's records, predictions, a
    stream's micro-batches), whose checksum files must move and go with the files they cover."""

    def __init__(self, spark: SparkSession | None, *, through_hadoop: bool = False) -> None:
        self._spark = spark
        # no path is on this host's disk (a Spark Connect client), or every path is Spark's to see
        self._remote = spark is not None and (through_hadoop or sessions.is_connect(spark))
        self._hadoop: FileSystem | None = None

    @classmethod
    def as_spark_sees(cls, spark: SparkSession) -> "Storage":
        return cls(spark, through_hadoop=True)

    @property
    def hadoop(self) -> FileSystem:
        if self._hadoop is None:
            if self._spark is None:
                raise StorageError("only local paths can be used without a Spark session")
            self._hadoop = filesystem(self._spark)
        return self._hadoop

    # -- paths ---------------------------------------------------------------------------------

    def qualify(self, path: str) -> str:
        """`file:/abs/path` for a local path, `scheme://authority/path` for the rest; a path
        without a scheme is on Hadoop's default filesystem, as Spark reads it."""
        path = path.rstrip("/") or path
        if self._spark is None and ("://" not in path or path.startswith("file:")):
            return "file:" + os.path.abspath(self.local(path) or path)
        with translated(path):
            return self.hadoop.qualify(path)

    @staticmethod
    def local(path: str) -> str | None:
        """The local path of a qualified `file:` path, None for any other scheme."""
        if path.startswith("file:"):
            rest = path[len("file:"):]
            return "/" + rest.lstrip("/") if rest.startswith("//") else rest
        return None

    def on_this_host(self, path: str) -> str | None:
        """Where this process opens `path` itself: its local path when it is a `file:` path on
        this host's disk, None when it goes through Hadoop's FileSystem (any other scheme, or
        any path at all from a Spark Connect client, whose disk is not the cluster's)."""
        return None if self._remote else self.local(path)

    # -- reading -------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        local = self.on_this_host(path)
        if local is not None:
            return os.path.exists(local)
        with translated(path):
            return self.hadoop.exists(path)

    def tree(self, directory: str) -> list[tuple[str, int]]:
        """(relative path, bytes) of every file below `directory`; none when it does not exist."""
        local = self.on_this_host(directory)
        if local is not None:
            out = []
            for top, _, files in os.walk(local):  # nothing when it does not exist
                for name in files:
                    full = os.path.join(top, name)
                    out.append((os.path.relpath(full, local), os.path.getsize(full)))
            return sorted(out)
        with translated(directory):
            return self.hadoop.tree(directory) if self.hadoop.exists(directory) else []

    def files(self, directory: str) -> list[tuple[str, int]]:
        """(name, bytes) of the data files directly in `directory` (hidden and marker files, `.x`
        and `_x`, left out); none when it does not exist."""
        local = self.on_this_host(directory)
        if local is not None:
            if not os.path.isdir(local):
                return []
            return sorted((n, os.path.getsize(os.path.join(local, n))) for n in os.listdir(local)
                          if not n.startswith((".", "_")) and os.path.isfile(os.path.join(local, n)))
        with translated(directory):
            return self.hadoop.list_files(directory)

    def data_files(self, path: str) -> list[str]:
        """The files Spark reads at `path`, qualified (Hadoop's view: partition directories
        included, hidden files left out, as Spark lists them)."""
        with translated(path):
            return self.hadoop.data_files(path)

    def read_first_line(self, path: str) -> str:
        """A text file's first line, without reading the rest (a CSV header)."""
        with translated(path):
            return self.hadoop.read_first_line(path)

    def children(self, directory: str) -> list[str]:
        """Names of the entries directly in `directory`."""
        local = self.on_this_host(directory)
        if local is not None:
            return sorted(os.listdir(local)) if os.path.isdir(local) else []
        with translated(directory):
            return self.hadoop.children(directory) if self.hadoop.exists(directory) else []

    def version(self, path: str) -> str:
        """Changes whenever the file is rewritten: its modification time and size."""
        local = self.on_this_host(path)
        with translated(path):
            if local is not None:
                st = os.stat(local)
                return f"{st.st_mtime_ns}-{st.st_size}"
            return f"{self.hadoop.modified(path)}-{self.hadoop.size(path)}"

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        local = self.on_this_host(path)
        if local is not None:
            with translated(path), open(local, "rb") as fh:
                fh.seek(offset)
                return fh.read() if length is None else fh.read(length)
        with translated(path):
            return self.hadoop.read_bytes(path, offset, length)

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def download(self, remote: str, local_path: str) -> None:
        """A file or directory to a local path (replacing it)."""
        local = self.on_this_host(remote)
        if os.path.isdir(local_path):
            shutil.rmtree(local_path)
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        if local is not None:
            with translated(remote):
                if os.path.isdir(local):
                    shutil.copytree(local, local_path)
                else:
                    shutil.copyfile(local, local_path)
            return
        with translated(remote):
            self.hadoop.download(remote, local_path)

    # -- writing -------------------------------------------------------------------------------

    def makedirs(self, path: str) -> None:
        local = self.on_this_host(path)
        with translated(path):
            if local is not None:
                os.makedirs(local, exist_ok=True)
            else:
                self.hadoop.mkdirs(path)

    def delete(self, path: str) -> None:
        """A file or a directory with everything in it; nothing when it does not exist."""
        local = self.on_this_host(path)
        with translated(path):
            if local is None:
                self.hadoop.delete(path)
            elif os.path.isdir(local) and not os.path.islink(local):
                shutil.rmtree(local)
            elif os.path.lexists(local):
                os.remove(local)

    def rename(self, src: str, dst: str) -> None:
        local_src, local_dst = self.on_this_host(src), self.on_this_host(dst)
        with translated(src):
            if local_src is not None and local_dst is not None:
                os.replace(local_src, local_dst)
            else:
                self.hadoop.rename(src, dst)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Written whole or not at all: a reader never sees half a file."""
        tmp = _beside(path, "tmp")
        local, local_tmp = self.on_this_host(path), self.on_this_host(tmp)
        with translated(path):
            if local is not None and local_tmp is not None:  # tmp is beside path: local when path is
                os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
                with open(local_tmp, "wb") as fh:
                    fh.write(data)
                os.replace(local_tmp, local)
                return
            self.hadoop.write_bytes(tmp, data)
            if self.hadoop.exists(path):
                self.hadoop.delete(path)
            self.hadoop.rename(tmp, path)

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def upload_file(self, local_file: str, remote: str) -> None:
        """A local file (a plot, a table) to `remote`, whole or not at all."""
        with open(local_file, "rb") as fh:
            self.write_bytes(remote, fh.read())

    def replace_dir(self, local_dir: str, remote: str) -> None:
        """Publish a local directory as `remote`, whole or absent: written beside it first, then renamed into place; an
        earlier `remote` is moved aside and deleted after (and put back if the rename fails)."""
        tmp = _beside(remote, "tmp")
        local_target, local_tmp = self.on_this_host(remote), self.on_this_host(tmp)
        with translated(remote):
            if local_target is not None and local_tmp is not None:  # tmp is beside remote: local when it is
                shutil.copytree(local_dir, local_tmp)
            else:
                self.hadoop.upload(local_dir, tmp)
        swap_into(self, tmp, remote)

    def merge_dir(self, local_dir: str, remote: str) -> None:
        """Each file of a local directory to the same place under `remote`, replacing files of
        the same name and keeping the rest (TensorBoard logs of earlier attempts)."""
        for top, _, files in os.walk(local_dir):
            for name in files:
                full = os.path.join(top, name)
                rel = os.path.relpath(full, local_dir)
                self.upload_file(full, f"{remote}/{rel}")

    # -- checks before a job starts ------------------------------------------------------------

    def check_writable(self, setting: str, path: str) -> None:
        """Create `path` (a directory) and a file in it, then remove the file: a missing
        connector, credentials or permission fails here, naming the setting."""
        with named(setting, path):
            self.makedirs(path)
            probe = f"{path}/.tfos-write-check-{uuid.uuid4().hex[:8]}"
            self.write_bytes(probe, b"")
            self.delete(probe)


class Directories(Protocol):
    """What publishing a directory needs of a filesystem: `Storage` (driver) or `HadoopFS`."""

    def exists(self, path: str) -> bool: ...
    def rename(self, src: str, dst: str) -> None: ...
    def delete(self, path: str) -> None: ...
    def children(self, directory: str) -> list[str]: ...


ASIDE = "old"  # `<target>.old-<id>`: the previous directory while a new one is moved into place
STAGING = "staging"  # `<target>.staging-<id>`: a directory being written, to be moved into place whole


def staging_beside(target: str) -> str:
    """A new directory beside `target` to write into before `swap_into` publishes it."""
    return _beside(target, STAGING)


def swap_into(fs: Directories, staging: str, target: str) -> None:
    """Publish the complete directory `staging` as `target`, whole or not at all: an earlier `target` is moved aside
    first and deleted last. A failure puts it back; a process killed between the two renames leaves it aside, where
    readers still find it (`readable`) and the next publish puts it back (`restore_aside`)."""
    restore_aside(fs, target)
    old = _beside(target, ASIDE)
    moved = False
    try:
        if fs.exists(target):
            fs.rename(target, old)
            moved = True
        fs.rename(staging, target)
    except BaseException:
        if moved and not fs.exists(target):
            fs.rename(old, target)  # put the previous one back
        fs.delete(staging)
        raise
    if moved:
        fs.delete(old)


def set_aside(fs: Directories, target: str) -> list[str]:
    """The directories `swap_into` moved aside from `target` and has not deleted (yet)."""
    return _beside_of(fs, target, ASIDE)


def left_staging(fs: Directories, target: str) -> list[str]:
    """Staging directories of `target` (`staging_beside`) that a killed writer left unpublished."""
    return _beside_of(fs, target, STAGING)


def _beside_of(fs: Directories, target: str, what: str) -> list[str]:
    parent, _, name = target.rstrip("/").rpartition("/")
    root = parent.endswith(":") or (parent.count("/") == 2 and "://" in parent)  # file:/x, hdfs://nn/x
    if not parent or not fs.exists(parent + "/" if root else parent):
        return []
    return [f"{parent}/{c}" for c in fs.children(parent + "/" if root else parent) if c.startswith(f"{name}.{what}-")]


def readable(fs: Directories, target: str) -> str:
    """Where `target`'s content is while a publish is between its renames, or was killed there:
    `target` itself, else the one directory moved aside from it. Readers only look: the
    publisher (`swap_into`) is the one that moves things."""
    if fs.exists(target):
        return target
    aside = set_aside(fs, target)
    return aside[0] if len(aside) == 1 else target


def restore_aside(fs: Directories, target: str) -> bool:
    """Finish what a killed `swap_into` left: with `target` missing, the one directory it moved
    aside goes back in place (True); with `target` there, what was left aside is deleted. Only a
    publisher runs it: a reader doing so could race a publish between its renames."""
    aside = set_aside(fs, target)
    if not aside:
        return False
    if fs.exists(target):
        for path in aside:
            fs.delete(path)
        return False
    if len(aside) > 1:  # which one was the last published cannot be told: leave them to the user
        return False
    fs.rename(aside[0], target)
    return True


def _beside(path: str, what: str) -> str:
    return f"{path.rstrip('/')}.{what}-{uuid.uuid4().hex[:10]}"
