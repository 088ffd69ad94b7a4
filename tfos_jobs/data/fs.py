"""Driver-side file operations through Hadoop's FileSystem, so outputs can live on any
filesystem Spark writes to (local, HDFS, S3A, ...), not only the local disk."""
from __future__ import annotations

from pyspark.sql import SparkSession


class HadoopFS:
    def __init__(self, spark: SparkSession, root: str):
        jvm = spark.sparkContext._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def qualify(self, path: str) -> str:
        return str(self._fs.makeQualified(self._path(path)).toString())

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def delete(self, path: str) -> None:
        self._fs.delete(self._path(path), True)

    def rename(self, src: str, dst: str) -> None:
        if not self._fs.rename(self._path(src), self._path(dst)):
            raise OSError(f"could not rename {src!r} to {dst!r}")

    def mkdirs(self, path: str) -> None:
        self._fs.mkdirs(self._path(path))

    def list_files(self, directory: str) -> list[tuple[str, int]]:
        """(name, bytes) of the data files in a directory, hidden and marker files excluded."""
        if not self.exists(directory):
            return []
        out = []
        for status in self._fs.listStatus(self._path(directory)):
            name = status.getPath().getName()
            if status.isFile() and not name.startswith((".", "_")):
                out.append((name, int(status.getLen())))
        return sorted(out)

    def write_text(self, path: str, text: str) -> None:
        stream = self._fs.create(self._path(path), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def read_first_line(self, path: str, limit: int = 1 << 16) -> str:
        """The file's first line (at most `limit` bytes), without reading the rest."""
        stream = self._fs.open(self._path(path))
        try:
            head = bytes(stream.readNBytes(limit))
        finally:
            stream.close()
        return head.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")

    def read_text(self, path: str) -> str:
        stream = self._fs.open(self._path(path))
        try:
            data = bytearray()
            while True:
                chunk = stream.readNBytes(1 << 16)  # byte[] arrives as bytes
                if not chunk:
                    break
                data.extend(chunk)
            return data.decode("utf-8", errors="replace")
        finally:
            stream.close()
