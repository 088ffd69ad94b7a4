"""P16: how a TF node's input files reach it, at any file size.

Both on a `local-cluster` of two executors with `spark.executor.memory = 1g`:
  * P16a: the files of a two-worker node job (each node's `_meta/`, eval split and shard of the
    train split) placed on the nodes' local disks, MB/s: the package's default path (the jar's
    `tfos-node-inputs` source spooling each file to the executor's disk, the node's `mapInArrow`
    task moving it into place) against the whole-file path it replaced
    (`SparkContext.binaryFiles`: each file one byte array in the executor's heap), on the 16x
    dataset, whose files the whole-file path can still take; the source's chunk delivery
    (`train.node_inputs = "chunks"`: the files' bytes through Arrow) beside them;
  * P16b: one epoch of two-worker training on a train split of two files of at least 1.5 GB each
    (the 1x train files concatenated: TFRecord files hold independent records), against the same
    on two files of about 50 MB: the executors' peak resident memory (each executor's JVM and
    every process under it, the TF node's included), which must not grow with the file size
    (`Sizes.p16_large_mb`, `p16_small_mb`: smaller in the smoke run).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import tempfile
import time
from typing import Any, Iterator

from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample
from benchmarks.memory import DRIVER, Peaks
from tfos_jobs.contracts.dataset import META, MANIFEST, Split
from tfos_jobs.topology import CHUNKS, SPOOL, Strategy, roles

NAME = "P16"
MASTER = "local-cluster[2,1,1024]"  # two executors of 1 GiB heap each
SESSION_CONF = {"spark.executor.memory": "1g"}
WORKERS = 2
MIB = 2**20
LARGE, SMALL = "large files", "small files"
P16A_CHUNKS = "P16a chunks"  # the chunk delivery's MB/s, a detail of P16a
STEPS = 30  # training steps of the one epoch: the input's memory is the question, not the model's speed


def node_inputs(bench: Bench) -> None:
    throughput(bench)
    memory(bench)


# -- P16a ---------------------------------------------------------------------------------------

def _inputs_to_disk(plans: list[dict[str, str]], batches: Iterator[Any]) -> Iterator[Any]:
    """The package's path on an executor: the node's files placed in a fresh local directory."""
    import pyarrow as pa
    from pyspark import TaskContext

    from tfos_jobs.cluster.node import inputs

    root = tempfile.mkdtemp(prefix="tfos-p16-")
    try:
        _, received = inputs.receive(batches, plans[TaskContext.get().partitionId()], root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    yield pa.RecordBatch.from_pydict({"bytes": [received]}, schema=pa.schema([("bytes", pa.int64())]))


def _whole_files_to_disk(partition: int, records: Iterator[tuple[str, bytes]]) -> Iterator[int]:
    """The whole-file path on an executor: each (path, bytes) written to a fresh local directory."""
    root = tempfile.mkdtemp(prefix="tfos-p16-")
    total = 0
    try:
        for i, (_, data) in enumerate(records):
            with open(os.path.join(root, str(i)), "wb") as fh:
                fh.write(data)
            total += len(data)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    yield total


def throughput(bench: Bench) -> None:
    from tfos_jobs.cluster.driver import node_inputs as plan_inputs
    from tfos_jobs.data import dataset

    spark = bench.spark
    meta = dataset.read(bench.big.prepare.output)
    plans = plan_inputs.plan(meta, roles(Strategy.MULTI_WORKER_MIRRORED, WORKERS, 0), Strategy.MULTI_WORKER_MIRRORED)
    total = sum(os.path.getsize(p.removeprefix("file:")) for wanted in plans
                for p in plan_inputs.qualified(meta, wanted))

    def package(delivery: str) -> Sample:
        started = time.perf_counter()
        rows = plan_inputs.frame(spark, meta, plans, delivery=delivery).mapInArrow(
            functools.partial(_inputs_to_disk, plans), "bytes long").collect()
        seconds = time.perf_counter() - started
        assert sum(r["bytes"] for r in rows) == total
        return {"MB_per_sec": total / 1e6 / seconds}

    def whole_files() -> Sample:
        sc = spark.sparkContext
        started = time.perf_counter()
        parts = [sc.binaryFiles(",".join(plan_inputs.qualified(meta, wanted))).coalesce(1) for wanted in plans]
        written = sc.union(parts).mapPartitionsWithIndex(_whole_files_to_disk).collect()
        seconds = time.perf_counter() - started
        assert sum(written) == total
        return {"MB_per_sec": total / 1e6 / seconds}

    out = bench.repeat("P16a node inputs", {SPOOL: functools.partial(package, SPOOL), "whole files": whole_files,
                                            CHUNKS: functools.partial(package, CHUNKS)})
    largest = max(size for split in meta.manifest.splits.values() for _, size in split.files)
    bench.run.details[P16A_CHUNKS] = Figure("chunks", "MB/s", out[CHUNKS]["MB_per_sec"])
    bench.run.results.append(Result(
        "P16a", f"a two-worker node job's input files placed on the nodes' disks, MB/s: spooled by the "
                f"tfos-node-inputs source to the executors' disks and moved into place by the nodes' tasks vs whole "
                f"files (binaryFiles), on the 16x dataset ({total / MIB:,.0f} MiB in all, files up to "
                f"{largest / MIB:,.0f} MiB)",
        Figure("spooled", "MB/s", out[SPOOL]["MB_per_sec"]), Figure("whole files", "MB/s",
                                                                   out["whole files"]["MB_per_sec"]), 0.9, ">="))


# -- P16b ---------------------------------------------------------------------------------------

def concatenated(source: str, target: str, at_least: int, files: int) -> str:
    """A dataset like `source` whose train split is `files` files of at least `at_least` bytes,
    each the source's train files over and over; the eval split and `_meta/` as they are."""
    from tfos_jobs.data import dataset

    meta = dataset.read(source)
    root = source.removeprefix("file:")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(f"{root}/{META}", f"{target}/{META}")
    shutil.copytree(f"{root}/{Split.EVAL}", f"{target}/{Split.EVAL}")
    os.makedirs(f"{target}/{Split.TRAIN}")
    parts = [f"{root}/{Split.TRAIN}/{name}" for name, _ in meta.manifest.splits[Split.TRAIN].files]
    one_pass = sum(os.path.getsize(p) for p in parts)
    copies = -(-at_least // one_pass)
    names = []
    for i in range(files):
        name = f"part-{i:05d}.tfrecord"
        with open(f"{target}/{Split.TRAIN}/{name}", "wb") as out:
            for _ in range(copies):
                for p in parts:
                    with open(p, "rb") as fh:
                        shutil.copyfileobj(fh, out, 16 * MIB)
        names.append(name)
    manifest = json.loads(open(f"{root}/{META}/{MANIFEST}", encoding="utf-8").read())
    train = manifest["splits"][Split.TRAIN]
    train["records"] = train["records"] * copies * files
    train["files"] = [{"path": n, "bytes": os.path.getsize(f"{target}/{Split.TRAIN}/{n}")} for n in names]
    manifest["output"] = f"file:{target}"
    with open(f"{target}/{META}/{MANIFEST}", "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
    for top, _, names in os.walk(target):  # Hadoop's checksums of the copied files no longer hold for the manifest
        for name in names:
            if name.endswith(".crc"):
                os.remove(os.path.join(top, name))
    return target


def memory(bench: Bench) -> None:
    from tfos_jobs.jobs.train.driver import job as train

    peaks: dict[str, dict[str, int]] = {}
    sizes: dict[str, int] = {}
    s = bench.sizes
    for label, at_least in ((SMALL, s.p16_small_mb * MIB), (LARGE, s.p16_large_mb * MIB)):
        target = concatenated(bench.small.prepare.output, f"{bench.work}/p16-{label.split()[0]}", at_least, WORKERS)
        sizes[label] = min(os.path.getsize(f"{target}/{Split.TRAIN}/{n}") for n in os.listdir(f"{target}/{Split.TRAIN}"))
        tr = dataclasses.replace(bench.small.train, dataset=target, model_dir=f"{target}-model", workers=WORKERS,
                                 strategy=Strategy.MULTI_WORKER_MIRRORED, epochs=1, steps_per_epoch=STEPS,
                                 in_memory_mb=64, profile_steps=0)
        meter = Peaks()
        started = time.perf_counter()
        meter.around(lambda: train.run(bench.spark, dataclasses.replace(bench.small, train=tr), overwrite=True,
                                       log=bench.indented))
        peaks[label] = meter.peak
        bench.say(f"  P16b {label} ({sizes[label] / MIB:,.0f} MiB each): {time.perf_counter() - started:.0f} s, peak "
                  + ", ".join(f"{g} {v / MIB:,.0f} MiB" for g, v in sorted(meter.peak.items())))
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(f"{target}-model", ignore_errors=True)
    executor = {label: max((v for g, v in p.items() if g != DRIVER), default=0) for label, p in peaks.items()}
    bench.run.results.append(Result(
        "P16b", f"the largest executor's peak resident memory (its JVM, 1 GiB heap, and every process under it) over "
                f"one epoch of two-worker training on a train split of two {sizes[LARGE] / MIB:,.0f} MiB files vs two "
                f"{sizes[SMALL] / MIB:,.0f} MiB files",
        Figure(f"{sizes[LARGE] / MIB:,.0f} MiB files", "MiB", [executor[LARGE] / MIB]),
        Figure(f"{sizes[SMALL] / MIB:,.0f} MiB files", "MiB", [executor[SMALL] / MIB]), 1.25, "<="))
    bench.run.facts[NAME] = {"peaks": peaks, "sizes": sizes}
