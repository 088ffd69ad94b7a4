"""Files on any filesystem the Spark session reaches, from the driver.

A cluster shares no disk, and TensorFlow opens only local paths (and gs://), so every dataset,
model directory, sweep directory and output path goes through here on the driver: local paths
(`file:` or a relative path while Hadoop's default filesystem is local) with Python's own file
calls, the rest (hdfs://, s3a://, abfs://, gs://, viewfs://, ...) through Hadoop's FileSystem
with the session's Hadoop configuration, so the credentials and settings Spark already has apply.

Executors never use this: TF nodes get their inputs through Spark (`driver.node_inputs`) and
hand their outputs to the driver over the control channel, which publishes them here.

Publishing is whole or absent: a directory is written beside its target and renamed into
place (on object stores, whose renames copy, "absent" holds until the copy ends).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from typing import Iterator

from tfos_jobs.errors import ConfigError, TfosError

CHUNK = 1 << 20


class StorageError(TfosError):
    """A filesystem call failed; the message says why in a user's words (no Java stack).
    `missing`: the path does not exist (as opposed to being unreachable or forbidden)."""

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing


class HadoopFS:
    """The JVM side: Hadoop's FileSystem for any path, through the session's gateway (or, with
    `spark=None`, the gateway spark-submit started, before any session: `before_session`)."""

    def __init__(self, spark, *, jvm=None, hadoop_conf=None):
        if spark is not None:
            jvm, hadoop_conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
        self._jvm = jvm
        self._conf = hadoop_conf
        self._path = self._jvm.org.apache.hadoop.fs.Path

    @classmethod
    def before_session(cls, url: str) -> "HadoopFS":
        """The Hadoop configuration a session would get (HADOOP_CONF_DIR and spark.hadoop.* of
        spark-submit), in spark-submit's JVM: for a file needed before the session is built, such
        as the job's config. Without spark-submit there is no JVM yet to read `url` with."""
        if "PYSPARK_GATEWAY_PORT" not in os.environ:
            raise StorageError(f"{url!r} is on a Hadoop filesystem, which a job reads before its Spark session "
                               "only under spark-submit: run it with `tfos submit`, or give a local file")
        from pyspark import SparkContext

        SparkContext._ensure_initialized()
        jvm = SparkContext._jvm
        conf = jvm.org.apache.spark.deploy.SparkHadoopUtil.get().newConfiguration(jvm.org.apache.spark.SparkConf(True))
        return cls(None, jvm=jvm, hadoop_conf=conf)

    def fs(self, path: str):
        return self._path(path).getFileSystem(self._conf)

    def qualify(self, path: str) -> str:
        return str(self.fs(path).makeQualified(self._path(path)).toString())

    def exists(self, path: str) -> bool:
        return bool(self.fs(path).exists(self._path(path)))

    def delete(self, path: str) -> None:
        self.fs(path).delete(self._path(path), True)

    def rename(self, src: str, dst: str) -> None:
        if not self.fs(src).rename(self._path(src), self._path(dst)):
            raise OSError(f"could not rename {src!r} to {dst!r}")

    def mkdirs(self, path: str) -> None:
        self.fs(path).mkdirs(self._path(path))

    def list_files(self, directory: str) -> list[tuple[str, int]]:
        """(name, bytes) of the data files in a directory, hidden and marker files excluded."""
        if not self.exists(directory):
            return []
        out = []
        for status in self.fs(directory).listStatus(self._path(directory)):
            name = status.getPath().getName()
            if status.isFile() and not name.startswith((".", "_")):
                out.append((name, int(status.getLen())))
        return sorted(out)

    def children(self, directory: str) -> list[str]:
        """Names of the entries directly in `directory`."""
        return sorted(str(s.getPath().getName()) for s in self.fs(directory).listStatus(self._path(directory)))

    def data_files(self, path: str) -> list[str]:
        """The data files Spark reads at `path`, qualified: the file itself, or every file below
        the directory (partition directories such as `date=2024-01-01/` included), skipping
        hidden names as Spark does (`.x`, `_x` unless it holds `=`, `*._COPYING_`)."""
        fs, root = self.fs(path), self._path(path)
        if not fs.exists(root):
            return []
        if fs.getFileStatus(root).isFile():
            return [str(fs.makeQualified(root).toString())]
        out, pending = [], [root]
        while pending:
            for status in fs.listStatus(pending.pop()):
                name = str(status.getPath().getName())
                if name.startswith(".") or (name.startswith("_") and "=" not in name) or name.endswith("._COPYING_"):
                    continue
                if status.isDirectory():
                    pending.append(status.getPath())
                else:
                    out.append(str(status.getPath().toString()))
        return sorted(out)

    def tree(self, directory: str) -> list[tuple[str, int]]:
        """(path relative to `directory`, bytes) of every file below it, checksum files excluded."""
        root = self._path(directory)
        fs = self.fs(directory)
        base = str(fs.makeQualified(root).toUri().getPath()).rstrip("/")
        out = []
        files = fs.listFiles(root, True)
        while files.hasNext():
            status = files.next()
            path = str(status.getPath().toUri().getPath())
            if not status.getPath().getName().endswith(".crc"):
                out.append((path[len(base) + 1:], int(status.getLen())))
        return sorted(out)

    def size(self, path: str) -> int:
        return int(self.fs(path).getFileStatus(self._path(path)).getLen())

    def modified(self, path: str) -> int:
        """Milliseconds since the epoch."""
        return int(self.fs(path).getFileStatus(self._path(path)).getModificationTime())

    def write_bytes(self, path: str, data: bytes) -> None:
        stream = self.fs(path).create(self._path(path), True)
        try:
            for start in range(0, len(data), CHUNK):
                stream.write(bytearray(data[start:start + CHUNK]))
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        stream = self.fs(path).open(self._path(path))
        try:
            if offset:
                stream.seek(offset)
            data = bytearray()
            while length is None or len(data) < length:
                want = CHUNK if length is None else min(CHUNK, length - len(data))
                chunk = stream.readNBytes(want)  # byte[] arrives as bytes
                if not chunk:
                    break
                data.extend(chunk)
            return bytes(data)
        finally:
            stream.close()

    def read_first_line(self, path: str, limit: int = 1 << 16) -> str:
        """The file's first line (at most `limit` bytes), without reading the rest."""
        head = self.read_bytes(path, 0, limit)
        return head.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8", errors="replace")

    def upload(self, local: str, remote: str) -> None:
        """A local file or directory to `remote` (replaced), copied by the JVM."""
        self.fs(remote).copyFromLocalFile(False, True, self._path(local), self._path(remote))

    def download(self, remote: str, local: str) -> None:
        """`remote` (file or directory) to the local path `local`, without checksum files."""
        self.fs(remote).copyToLocalFile(False, self._path(remote), self._path(local), True)

class Storage:
    """Driver-side file operations on qualified paths (`qualify` first): local ones with
    Python, the rest with `HadoopFS`. Every failure is a `StorageError` in plain words.
    Without a session (`spark=None`) only local paths can be used."""

    def __init__(self, spark):
        self._spark = spark
        self._hadoop: HadoopFS | None = None

    @property
    def hadoop(self) -> HadoopFS:
        if self._hadoop is None:
            if self._spark is None:
                raise StorageError("only local paths can be used without a Spark session")
            self._hadoop = HadoopFS(self._spark)
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

    # -- reading -------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        local = self.local(path)
        if local is not None:
            return os.path.exists(local)
        with translated(path):
            return self.hadoop.exists(path)

    def tree(self, directory: str) -> list[tuple[str, int]]:
        """(relative path, bytes) of every file below `directory`; none when it does not exist."""
        local = self.local(directory)
        if local is not None:
            out = []
            for top, _, files in os.walk(local):  # nothing when it does not exist
                for name in files:
                    full = os.path.join(top, name)
                    out.append((os.path.relpath(full, local), os.path.getsize(full)))
            return sorted(out)
        with translated(directory):
            return self.hadoop.tree(directory) if self.hadoop.exists(directory) else []

    def children(self, directory: str) -> list[str]:
        """Names of the entries directly in `directory`."""
        local = self.local(directory)
        if local is not None:
            return sorted(os.listdir(local)) if os.path.isdir(local) else []
        with translated(directory):
            return self.hadoop.children(directory) if self.hadoop.exists(directory) else []

    def version(self, path: str) -> str:
        """Changes whenever the file is rewritten: its modification time and size."""
        local = self.local(path)
        with translated(path):
            if local is not None:
                st = os.stat(local)
                return f"{st.st_mtime_ns}-{st.st_size}"
            return f"{self.hadoop.modified(path)}-{self.hadoop.size(path)}"

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        local = self.local(path)
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
        local = self.local(remote)
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
        local = self.local(path)
        with translated(path):
            if local is not None:
                os.makedirs(local, exist_ok=True)
            else:
                self.hadoop.mkdirs(path)

    def delete(self, path: str) -> None:
        """A file or a directory with everything in it; nothing when it does not exist."""
        local = self.local(path)
        with translated(path):
            if local is None:
                self.hadoop.delete(path)
            elif os.path.isdir(local) and not os.path.islink(local):
                shutil.rmtree(local)
            elif os.path.lexists(local):
                os.remove(local)

    def rename(self, src: str, dst: str) -> None:
        local_src, local_dst = self.local(src), self.local(dst)
        with translated(src):
            if local_src is not None and local_dst is not None:
                os.replace(local_src, local_dst)
            else:
                self.hadoop.rename(src, dst)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Written whole or not at all: a reader never sees half a file."""
        tmp = _beside(path, "tmp")
        local, local_tmp = self.local(path), self.local(tmp)
        with translated(path):
            if local is not None:
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
        """Publish a local directory as `remote`, whole or absent: written beside it first, then
        renamed into place; an earlier `remote` is moved aside and deleted after (and put back
        if the rename fails)."""
        tmp, old = _beside(remote, "tmp"), _beside(remote, "old")
        local_target = self.local(remote)
        with translated(remote):
            if local_target is not None:
                shutil.copytree(local_dir, self.local(tmp))
            else:
                self.hadoop.upload(local_dir, tmp)
        self._swap(tmp, old, remote)

    def _swap(self, tmp: str, old: str, target: str) -> None:
        moved = False
        try:
            if self.exists(target):
                self.rename(target, old)
                moved = True
            self.rename(tmp, target)
        except BaseException:
            if moved and not self.exists(target):
                self.rename(old, target)  # put the previous one back
            self.delete(tmp)
            raise
        if moved:
            self.delete(old)

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


def _beside(path: str, what: str) -> str:
    return f"{path.rstrip('/')}.{what}-{uuid.uuid4().hex[:10]}"


# -- errors ----------------------------------------------------------------------------------

# Java exception classes and what they mean to a user, most specific first.
_REASONS = (
    ("UnsupportedFileSystemException", "no filesystem for this scheme in the Spark session: add its connector jar "
                                       "(e.g. hadoop-aws for s3a://, hadoop-azure for abfs://, the GCS connector for "
                                       "gs://) with spark.jars or --jars"),
    ("NoAuthWithAWSException", "no credentials: set them for Spark (e.g. spark.hadoop.fs.s3a.access.key and "
                               "secret.key, a credentials provider, or the environment)"),
    ("AccessControlException", "permission denied"),
    ("AccessDeniedException", "access denied (wrong credentials, or no permission)"),
    ("UnknownHostException", "unknown host"),
    ("ConnectException", "cannot connect (is the filesystem's server up and reachable from the driver?)"),
    ("ConnectTimeoutException", "connection timed out"),
    ("FileNotFoundException", "does not exist"),
    ("FileAlreadyExistsException", "already exists"),
)


def reason(error: BaseException) -> str:
    """A one-line reason for a failed filesystem call: what it means, then Java's own words."""
    text = str(getattr(error, "java_exception", None) or error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    for marker, meaning in _REASONS:
        if marker in text:
            detail = first.split(": ", 1)[-1][:300]
            return f"{meaning} ({detail})"
    if isinstance(error, FileNotFoundError):
        return "does not exist"
    if isinstance(error, PermissionError):
        return "permission denied"
    return first[:300]


@contextlib.contextmanager
def translated(path: str) -> Iterator[None]:
    """Python and Java errors of a call on `path` as a StorageError naming the path."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except (Py4JJavaError, OSError) as e:
        missing = isinstance(e, FileNotFoundError) or "java.io.FileNotFoundException" in str(
            getattr(e, "java_exception", ""))
        raise StorageError(f"{path}: {reason(e)}", missing=missing) from None


@contextlib.contextmanager
def named(setting: str, path: str) -> Iterator[None]:
    """A StorageError inside becomes a ConfigError that names the setting too."""
    try:
        yield
    except StorageError as e:
        raise ConfigError(f"{setting} = {path!r}: {str(e).split(': ', 1)[-1]}") from None
