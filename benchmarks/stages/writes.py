"""Writing the prepared records three ways (P1, P2), and reading them with tf.data."""
from __future__ import annotations

import shutil
import time
import uuid
from typing import Any, Callable

from pyspark.sql import DataFrame

from benchmarks import pipeline, writers
from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample
from tfos_jobs.contracts.dataset import SPLITS, Split
from tfos_jobs.data import dataset
from tfos_jobs.features.spec import SPARK_TYPES


WRITE_PARTITIONS = 8


def records_frame(bench: Bench) -> DataFrame:
    """The 16x data set's records, as prepare wrote them, cached: the DataFrame P1 and P2 write."""
    meta = dataset.read(bench.big.prepare.output)
    schema = ", ".join(f"`{n}` {SPARK_TYPES[c['dtype']]}" for n, c in meta.spec.record_schema().items())
    return bench.spark.read.format(bench.big.prepare.tfrecord_format).schema(schema) \
        .load([meta.split_dir(s) for s in SPLITS]).repartition(WRITE_PARTITIONS).cache()


def writes(bench: Bench) -> None:
    df = records_frame(bench)
    rows = df.count()
    fmt_name = bench.big.prepare.tfrecord_format
    bench.run.sizes["P1 P2 DataFrame"] = (
        f"{rows:,} rows x {len(df.columns)} columns (the 16x records), {WRITE_PARTITIONS} partitions, cached; "
        f"a Parquet or TFRecord sample writes it {bench.sizes.write_rounds} times, a Python-writer sample once")
    kinds: dict[str, Callable[[DataFrame, str], Any]] = {
        "parquet": writers.write_parquet,
        "tfrecord": lambda d, p: writers.write_tfrecord(d, p, fmt_name),
        "python": writers.write_python_rows,
    }

    def once(kind: str, frame: DataFrame, n: int, rounds: int = 1) -> Sample:
        """`rounds` writes of `frame`, each into a new directory (deleted afterwards, untimed)."""
        seconds = 0.0
        for _ in range(rounds):
            path = f"{bench.work}/writes/{kind}-{uuid.uuid4().hex[:8]}"
            started = time.perf_counter()
            written = kinds[kind](frame, path)
            seconds += time.perf_counter() - started
            shutil.rmtree(path, ignore_errors=True)
            if written is not None and written != n:
                raise RuntimeError(f"the {kind} writer wrote {written} of {n} rows")
        return {"rows_per_sec": rounds * n / seconds}

    if bench.sizes.warmup:  # start the Python workers, import TF in them, warm the JIT: on a 2% sample
        sample = df.sample(fraction=0.02, seed=1).cache()
        n = sample.count()
        for kind in kinds:
            bench.say(f"  writes: warm-up {kind}")
            once(kind, sample, n)
        sample.unpersist()
    rounds = {"parquet": bench.sizes.write_rounds, "tfrecord": bench.sizes.write_rounds, "python": 1}
    out = bench.repeat("writes", {k: (lambda k=k: once(k, df, rows, rounds[k])) for k in kinds}, warmup=False)
    df.unpersist()
    tfrecord = Figure("TFRecord data source", "rows/s", out["tfrecord"]["rows_per_sec"])
    bench.run.results.append(Result(
        "P1", "prepare: TFRecord write via the data source vs Parquet write of the same DataFrame",
        tfrecord, Figure("Parquet", "rows/s", out["parquet"]["rows_per_sec"]), 0.8, ">="))
    bench.run.results.append(Result(
        "P2", "TFRecord write via the data source vs a Python per-row writer (TFoS dfutil's tf.train.Example per Row)",
        tfrecord, Figure("Python per-row writer", "rows/s", out["python"]["rows_per_sec"]), 10.0, ">="))


def input_pipeline(bench: Bench) -> None:
    meta = dataset.read(bench.big.prepare.output)
    files, spec, batch = meta.files(Split.TRAIN), meta.spec, bench.big.train.batch_size
    builders = {"in memory": pipeline.in_memory, "batch then parse": pipeline.batch_then_parse,
                "parse then batch": pipeline.parse_then_batch}

    batches = max(1, bench.sizes.input_records // batch)

    def variant(build) -> Callable[[], Sample]:
        return lambda: {"records_per_sec": pipeline.records_per_sec(
            build(files, spec, batch, meta.compression), batches, batch)}

    bench.run.sizes["input pipeline"] = (f"{batches} batches of {batch:,} from the 16x train split "
                                        f"({len(files)} files), in the driver")
    out = bench.repeat("input pipeline", {name: variant(b) for name, b in builders.items()})
    for name in builders:
        bench.run.details[f"input {name}"] = Figure(f"tf.data, {name}", "records/s", out[name]["records_per_sec"])
