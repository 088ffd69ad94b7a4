"""The three ways P1 and P2 write the same DataFrame: Parquet, the TFRecord data source, and
a Python per-row writer built the way TensorFlowOnSpark's `dfutil.saveAsTFRecords` builds its
records (`df.rdd.mapPartitions(toTFExample(df.dtypes))`: a Python Row per record, a
`tf.train.Example` per Row).

dfutil then hands the records to a Hadoop output format from the tensorflow-hadoop jar; that
jar is not part of this stack, so each partition writes its file with `tf.io.TFRecordWriter`
instead, which only saves the baseline the JVM round trip.
"""
from __future__ import annotations

import os
from functools import partial
from typing import Iterator

from pyspark.sql import DataFrame

from tfos_jobs.data.tfrecord import DEFAULT_FORMAT


def write_parquet(df: DataFrame, path: str) -> None:
    df.write.parquet(path)


def write_tfrecord(df: DataFrame, path: str, fmt: str = DEFAULT_FORMAT) -> None:
    df.write.format(fmt).option("recordType", "Example").save(path)


def write_python_rows(df: DataFrame, path: str) -> int:
    """Every partition to `<path>/part-NNNNN.tfrecord`; returns the records written."""
    os.makedirs(path, exist_ok=True)
    return sum(df.rdd.mapPartitionsWithIndex(partial(_write_partition, path=path, dtypes=df.dtypes)).collect())


def _write_partition(index: int, rows: Iterator, *, path: str, dtypes: list[tuple[str, str]]) -> Iterator[int]:
    """Executor side: TFoS's own Row -> tf.train.Example conversion, then a TFRecord file."""
    import tensorflow as tf
    from tensorflowonspark import dfutil

    written = 0
    with tf.io.TFRecordWriter(f"{path}/part-{index:05d}.tfrecord") as out:
        for record, _ in dfutil.toTFExample(dtypes)(rows):
            out.write(bytes(record))
            written += 1
    yield written
