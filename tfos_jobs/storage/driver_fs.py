"""Hadoop's FileSystem as the driver calls it for a client without a JVM (a Spark Connect client):
the same operations as `HadoopFS`, each one a call on the driver (`driver_calls`), with the
session's Hadoop settings and credentials. Files travel in chunks of CHUNK bytes."""
from __future__ import annotations

import base64
import os
from typing import Any, Callable

from tfos_jobs import driver_calls as calls

CHUNK = 4 << 20


class DriverFS:
    def __init__(self, spark: Any):
        self._spark = spark

    def _call(self, name: str, **args: Any) -> Any:
        return calls.call(self._spark, name, **args)

    def qualify(self, path: str) -> str:
        return str(self._call(calls.FS_QUALIFY, path=path))

    def exists(self, path: str) -> bool:
        return bool(self._call(calls.FS_EXISTS, path=path))

    def delete(self, path: str) -> None:
        self._call(calls.FS_DELETE, path=path)

    def rename(self, src: str, dst: str) -> None:
        self._call(calls.FS_RENAME, src=src, dst=dst)

    def mkdirs(self, path: str) -> None:
        self._call(calls.FS_MKDIRS, path=path)

    def _status(self, path: str) -> dict[str, Any]:
        status = self._call(calls.FS_STATUS, path=path)
        if status is None:
            raise FileNotFoundError(f"java.io.FileNotFoundException: {path}")
        return status

    def list_files(self, directory: str) -> list[tuple[str, int]]:
        """(name, bytes) of the data files in a directory, hidden and marker files excluded."""
        if not self.exists(directory):
            return []
        return sorted((e["name"], int(e["size"])) for e in self._call(calls.FS_LIST, path=directory)
                      if not e["dir"] and not e["name"].startswith((".", "_")))

    def children(self, directory: str) -> list[str]:
        return sorted(e["name"] for e in self._call(calls.FS_LIST, path=directory))

    def data_files(self, path: str) -> list[str]:
        return list(self._call(calls.FS_DATA_FILES, path=path))

    def tree(self, directory: str) -> list[tuple[str, int]]:
        return [(rel, int(size)) for rel, size in self._call(calls.FS_TREE, path=directory)]

    def size(self, path: str) -> int:
        return int(self._status(path)["size"])

    def modified(self, path: str) -> int:
        """Milliseconds since the epoch."""
        return int(self._status(path)["modified"])

    def write_bytes(self, path: str, data: bytes) -> None:
        self._write(path, len(data), lambda start: data[start:start + CHUNK])

    def _write_file(self, local: str, remote: str) -> None:
        with open(local, "rb") as fh:
            self._write(remote, os.path.getsize(local), lambda _: fh.read(CHUNK))

    def _write(self, path: str, size: int, chunk: Callable[[int], bytes]) -> None:
        """`size` bytes to `path`, a chunk at a time: `chunk(offset)` gives the CHUNK bytes at `offset`."""
        for start in range(0, max(size, 1), CHUNK):
            self._call(calls.FS_WRITE, path=path, offset=start, data=base64.b64encode(chunk(start)).decode("ascii"),
                       last=start + CHUNK >= size)

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        out = bytearray()
        while length is None or len(out) < length:
            want = CHUNK if length is None else min(CHUNK, length - len(out))
            chunk = base64.b64decode(self._call(calls.FS_READ, path=path, offset=offset + len(out), length=want))
            out += chunk
            if len(chunk) < want:
                break
        return bytes(out)

    def read_first_line(self, path: str, limit: int = 1 << 16) -> str:
        head = self.read_bytes(path, 0, limit)
        return head.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8", errors="replace")

    def upload(self, local: str, remote: str) -> None:
        """A local file or directory to `remote` (replaced)."""
        if self.exists(remote):
            self.delete(remote)
        if not os.path.isdir(local):
            self._write_file(local, remote)
            return
        self.mkdirs(remote)
        for top, _, names in os.walk(local):
            rel_top = os.path.relpath(top, local)
            if rel_top != ".":
                self.mkdirs(f"{remote}/{rel_top.replace(os.sep, '/')}")
            for name in names:
                rel = os.path.relpath(os.path.join(top, name), local).replace(os.sep, "/")
                self._write_file(os.path.join(top, name), f"{remote}/{rel}")

    def download(self, remote: str, local: str) -> None:
        """`remote` (file or directory) to the local path `local`, without checksum files."""
        status = self._status(remote)
        if not status["dir"]:
            self._read_file(remote, int(status["size"]), local)
            return
        os.makedirs(local, exist_ok=True)
        for rel, size in self.tree(remote):
            target = os.path.join(local, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            self._read_file(f"{remote}/{rel}", size, target)

    def _read_file(self, remote: str, size: int, local: str) -> None:
        with open(local, "wb") as fh:
            for start in range(0, size, CHUNK):
                fh.write(self.read_bytes(remote, start, min(CHUNK, size - start)))
