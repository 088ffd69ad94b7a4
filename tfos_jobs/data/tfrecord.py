"""Writing tf.Example records from Spark through a JVM TFRecord data source.

The default format, `tfos.spark.tfrecord`, is this package's own data source (built into
`tfos_jobs/jars/`). LinkedIn's spark-tfrecord takes the same options: set
`prepare.tfrecord_format = "tfrecord"` and add its package to `spark.jars.packages`.
"""
from __future__ import annotations

from pyspark.sql import DataFrame

DEFAULT_FORMAT = "tfos.spark.tfrecord"
CODECS = {"none": None, "gzip": "org.apache.hadoop.io.compress.GzipCodec"}
TF_COMPRESSION = {"none": None, "gzip": "GZIP"}


def write_partitioned(df: DataFrame, path: str, partition_by: str, *, files: int, key: str | None,
                      fmt: str = DEFAULT_FORMAT, compression: str = "none", record_type: str = "Example") -> None:
    """One Spark job: `files` files per value of `partition_by`, rows spread by key hash and
    sorted by key inside each file, so a re-run writes the same rows to the same files."""
    if key is not None:
        df = df.repartition(files, key).sortWithinPartitions(key)
    else:
        df = df.repartition(files)
    writer = df.write.format(fmt).option("recordType", record_type).partitionBy(partition_by)
    if CODECS[compression]:
        writer = writer.option("codec", CODECS[compression])
    writer.save(path)
