"""A node's input files, as Spark hands them to its task: (path, bytes) records, written to
the node's local disk under the names the driver gave them (`cluster.driver.node_inputs`).

Spark reads them from wherever the dataset lives (any filesystem its Hadoop configuration
reaches) on the node's own executor; TensorFlow then reads local files, held in memory when
the node's share fits (train.in_memory_mb) and streamed from disk when it does not.
"""
from __future__ import annotations

import os
import uuid
from typing import Iterable
from urllib.parse import urlparse


def key(path: str) -> str:
    """A file's path without scheme and authority: how a planned path and the path Spark
    reports for it (qualified, perhaps with another host name) are matched."""
    return urlparse(path).path or path


def receive(records: Iterable[tuple[str, bytes]], wanted: dict[str, str], root: str) -> int:
    """Write each record whose path is in `wanted` (key -> path under `root`); returns the
    number of files written. A file already there with the same size (another node of this
    host wrote it) is kept; each file appears whole (written beside it, then renamed)."""
    written = set()
    for path, data in records:
        rel = wanted.get(key(path))
        if rel is None:
            raise ValueError(f"Spark handed this node a file it was not sent: {path}")
        target = os.path.join(root, rel)
        written.add(rel)
        if os.path.isfile(target) and os.path.getsize(target) == len(data):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    missing = sorted(set(wanted.values()) - written)
    if missing:
        raise FileNotFoundError(f"{len(missing)} input file(s) did not arrive, e.g. {missing[0]}: Spark's stream of "
                                "them ended early (the executor lost, or out of memory: see its log)")
    return len(written)
