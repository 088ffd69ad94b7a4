"""A node's input files, as Spark hands them to its task (rows of the `tfos-node-inputs` data source,
`cluster.driver.node_inputs`), put on the node's local disk under the names the driver gave them.

Spark reads them from wherever the dataset lives (any filesystem its Hadoop configuration reaches) on the node's own
executor, and either copies each file to the executor's local disk (a row names the copy, which is moved into place:
`train.node_inputs = "spool"`) or sends it in chunks of a few MiB that are written here (`"chunks"`). Neither the
executor nor this process ever holds a whole file; TensorFlow then reads local files, held in memory when the node's
share fits (train.in_memory_mb) and streamed from disk when it does not.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import IO, Any, Iterable
from urllib.parse import urlparse

# The columns of a row (the jar's `NodeInputs.Schema`): COPY is the path of the executor's copy of
# the file when the source spools, else null and the file comes in DATA chunks.
NODE, FILE, OFFSET, SIZE, DATA, COPY = "node", "file", "offset", "size", "data", "copy"


def key(path: str) -> str:
    """A file's path without scheme and authority: how a planned path and the path Spark
    reports for it (qualified, perhaps with another host name) are matched."""
    return urlparse(path).path or path


class _File:
    """One file put beside its target (written chunk after chunk, or the executor's copy moved
    there whole), then renamed into place. A file another node of this host already placed
    (`keep`: the same name and size) is left as it is."""

    def __init__(self, target: str, size: int):
        self.target, self.size, self.next = target, size, 0
        self.keep = os.path.isfile(target) and os.path.getsize(target) == size
        self.tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        self.fh: IO[bytes] | None = None
        if not self.keep:
            os.makedirs(os.path.dirname(target), exist_ok=True)

    def write(self, offset: int, data: Any) -> None:
        if offset != self.next:
            raise ValueError(f"{self.target}: a chunk at offset {offset:,} arrived where {self.next:,} was due")
        if not self.keep:
            if self.fh is None:
                self.fh = open(self.tmp, "wb")
            self.fh.write(data)
        self.next += len(data)

    def take(self, local: str) -> None:
        """The whole file at once: the executor's copy moved beside the target (a rename on the
        same filesystem, else a copy)."""
        if os.path.getsize(local) != self.size:
            raise ValueError(f"{self.target}: the executor's copy holds {os.path.getsize(local):,} of "
                             f"{self.size:,} bytes")
        if not self.keep:
            shutil.move(local, self.tmp)
        self.next = self.size

    def done(self) -> bool:
        return self.next >= self.size

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
        if not self.keep:
            os.replace(self.tmp, self.target)

    def abandon(self) -> None:
        if self.fh is not None:
            self.fh.close()
        if os.path.exists(self.tmp):
            os.remove(self.tmp)


def receive(batches: Iterable[Any], wanted: dict[str, str], root: str) -> tuple[int, int]:
    """Put the files of the rows in `batches` (Arrow record batches: chunks, or the executor's copies) whose paths are
    in `wanted` (key -> path under `root`) in place; returns (files, bytes) received. A file already there with the same
    size (another node of this host placed it) is kept; each file appears whole."""
    written: set[str] = set()
    current: _File | None = None
    received = 0
    try:
        for batch in batches:
            files, offsets, sizes, data = (batch.column(c) for c in (FILE, OFFSET, SIZE, DATA))
            copies = batch.column(COPY) if COPY in batch.schema.names else None
            for i in range(batch.num_rows):
                path, offset = files[i].as_py(), offsets[i].as_py()
                if offset == 0:
                    if current is not None:
                        raise ValueError(f"{current.target}: ended at {current.next:,} of {current.size:,} bytes")
                    rel = wanted.get(key(path))
                    if rel is None:
                        raise ValueError(f"Spark handed this node a file it was not sent: {path}")
                    current = _File(os.path.join(root, rel), sizes[i].as_py())
                    written.add(rel)
                if current is None:
                    raise ValueError(f"{path}: a chunk at offset {offset:,} arrived before the file's start")
                local = copies[i].as_py() if copies is not None else None
                if local is not None:
                    current.take(local)
                    received += current.size
                else:
                    chunk = data[i].as_buffer()
                    current.write(offset, memoryview(chunk) if chunk is not None else b"")
                    received += len(chunk) if chunk is not None else 0
                if current.done():
                    current.close()
                    current = None
        if current is not None:
            raise ValueError(f"{current.target}: ended at {current.next:,} of {current.size:,} bytes")
    except BaseException:
        if current is not None:
            current.abandon()
        raise
    missing = sorted(set(wanted.values()) - written)
    if missing:
        raise FileNotFoundError(f"{len(missing)} input file(s) did not arrive, e.g. {missing[0]}: Spark's stream of "
                                "them ended early (the executor lost: see its log)")
    return len(written), received
