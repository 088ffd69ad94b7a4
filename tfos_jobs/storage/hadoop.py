"""Hadoop's FileSystem, through the Spark session's JVM: any path a cluster's data may be on
(hdfs://, s3a://, abfs://, gs://, viewfs://, file:), with the session's Hadoop settings."""
from __future__ import annotations

import os

from tfos_jobs.storage.errors import StorageError

CHUNK = 1 << 20


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
        if jvm is None:  # _ensure_initialized starts or joins the gateway, or raises
            raise StorageError(f"cannot read {url!r}: spark-submit's JVM is not reachable")
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
