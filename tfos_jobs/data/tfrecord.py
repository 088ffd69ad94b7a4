"""Writing tf.Example records from Spark through a JVM TFRecord data source.

The default format, `tfos.spark.tfrecord`, is this package's own data source (built into `tfos_jobs/jars/`). LinkedIn's
spark-tfrecord takes the same options: set `prepare.tfrecord_format = "tfrecord"` and add its package to
`spark.jars.packages`."""
from __future__ import annotations

from pyspark.sql import DataFrame

DEFAULT_FORMAT = "tfos.spark.tfrecord"
CODECS = {"none": None, "gzip": "org.apache.hadoop.io.compress.GzipCodec"}


def layout(df: DataFrame, files: int, key: str | None, then: tuple[str, ...] = ()) -> DataFrame:
    """`files` partitions, rows spread by key hash and sorted by key (and `then`, for keys with several rows) inside
    each, so a re-run writes the same rows, in the same order, to the same files."""
    if key is None:
        return df.repartition(files)
    return df.repartition(files, key).sortWithinPartitions(key, *then)


def write_partitioned(df: DataFrame, path: str, partition_by: str, *, files: int, key: str | None,
                      then: tuple[str, ...] = (), fmt: str = DEFAULT_FORMAT, compression: str = "none", record_type: str = "Example") -> None:
    """One Spark job: `files` files per value of `partition_by`. Only Spark's commit protocol
    makes files visible: a task attempt writes to its own temporary file, and only the
    attempt that commits is kept, so a retried task never leaves half a shard."""
    ordered = layout(df, files, key, then)
    if key is not None:
        # The writer needs rows grouped by `partition_by` and sorts by it alone otherwise, which
        # drops the key order: ties would come in shuffle-fetch order, which depends on how the
        # input was partitioned. Sorting by both keeps the same bytes for the same rows.
        ordered = ordered.sortWithinPartitions(partition_by, key, *then)
    writer = ordered.write.format(fmt).option("recordType", record_type).partitionBy(partition_by)
    if CODECS[compression]:
        writer = writer.option("codec", CODECS[compression])
    writer.save(path)
