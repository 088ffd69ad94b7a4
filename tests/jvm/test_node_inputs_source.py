"""The nodes' input files through the jar's `tfos-node-inputs` source, both deliveries
(`train.node_inputs`): each node's task puts exactly its planned files on its disk, byte for byte,
and the executor's spooled copies do not outlive the task.

Uses the shared `spark` fixture, so it tests the jar the package ships (tfos_jobs/jars/).
"""
from __future__ import annotations

import functools
import hashlib
import os
from typing import Any, Iterator

import pytest

from tfos_jobs.topology import CHUNKS, SPOOL

MIB = 2**20


def _receive(roots: list[str], plans: list[dict[str, str]], batches: Iterator[Any]) -> Iterator[Any]:
    """A node task's input step, then what it placed: (node, relative path, sha256, spool dir)."""
    import pyarrow as pa
    from pyspark import TaskContext

    from tfos_jobs.cluster.node import inputs

    node = TaskContext.get().partitionId()
    spooled: set[str] = set()

    def seen(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            spooled.update(os.path.dirname(p) for p in batch.column(inputs.COPY).to_pylist() if p)
            yield batch

    inputs.receive(seen(batches), plans[node], roots[node])
    rows = []
    for rel in sorted(plans[node].values()):
        with open(os.path.join(roots[node], rel), "rb") as fh:
            rows.append({"node": node, "rel": rel, "sha": hashlib.sha256(fh.read()).hexdigest(),
                         "spool": ",".join(sorted(spooled))})
    yield pa.RecordBatch.from_pylist(rows, schema=pa.schema(
        [("node", pa.int32()), ("rel", pa.string()), ("sha", pa.string()), ("spool", pa.string())]))


@pytest.mark.parametrize("delivery", [SPOOL, CHUNKS])
def test_each_node_gets_its_files_whole_and_nothing_spooled_is_left(spark, tmp_path, delivery):
    from tfos_jobs.cluster.driver import node_inputs

    data = tmp_path / "ds"
    (data / "train").mkdir(parents=True)
    (data / "_meta").mkdir()
    files = {"train/a.tfrecord": os.urandom(9 * MIB + 7), "train/b.tfrecord": os.urandom(1000),
             "_meta/empty": b""}  # a file of three chunks, one of less than a chunk, an empty one
    for rel, content in files.items():
        (data / rel).write_bytes(content)
    plans = [{f"{data}/train/a.tfrecord": "dataset/train/a.tfrecord", f"{data}/_meta/empty": "dataset/_meta/empty"},
             {f"{data}/train/b.tfrecord": "dataset/train/b.tfrecord", f"{data}/_meta/empty": "dataset/_meta/empty"}]
    roots = [str(tmp_path / "node0"), str(tmp_path / "node1")]
    paths = [[f"file:{p}" for p in plan] for plan in plans]
    frame = node_inputs.source(spark, paths, delivery=delivery)
    rows = frame.mapInArrow(functools.partial(_receive, roots, plans),
                            "node int, rel string, sha string, spool string").collect()
    got = sorted((r["node"], r["rel"], r["sha"]) for r in rows)
    want = sorted((n, rel, hashlib.sha256(files[rel.removeprefix("dataset/")]).hexdigest())
                  for n, plan in enumerate(plans) for rel in plan.values())
    assert got == want
    spools = {d for r in rows for d in r["spool"].split(",") if d}
    assert len(spools) == (2 if delivery == SPOOL else 0)  # one spool directory per task, or none
    assert not any(os.path.exists(d) for d in spools)  # removed when its task ended


def test_a_missing_file_fails_the_job_naming_it(spark, tmp_path):
    from tfos_jobs.cluster.driver import node_inputs

    missing = f"file:{tmp_path}/gone.tfrecord"
    with pytest.raises(Exception, match="gone.tfrecord"):
        node_inputs.source(spark, [[missing]], delivery=SPOOL).collect()
