"""Run by tests/hadoop/test_infra.py in a child process (its own local Spark session, with the S3A
settings and jars of the S3 server), or submitted to a cluster (then with CONF_JSON {}: spark-submit
brings the settings and the master):

    s3_roundtrip.py CONF_JSON URL

writes a DataFrame as Parquet to URL and reads it back; then reads it and writes beside it with a
wrong secret key (an S3A client of its own: fs.s3a.impl.disable.cache, as data source options).
Prints one S3-RESULT JSON line: for each step the rows and a checksum of what was read, or the
failure (the Java exception classes from the outermost to the root cause, and their messages).
"""
import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

conf, url = json.loads(sys.argv[1]), sys.argv[2]
builder = SparkSession.builder.appName("s3-roundtrip")
if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
    builder = builder.master("local[2]")
for key, value in {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **conf}.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("OFF")
WRONG = {"fs.s3a.impl.disable.cache": "true", "fs.s3a.secret.key": "not-the-secret"}


def attempt(step):
    try:
        return step()
    except Exception as e:  # a Py4JJavaError carries the Java exception
        chain, messages = [], []
        cause = getattr(e, "java_exception", None)
        while cause is not None and len(chain) < 12:
            chain.append(cause.getClass().getName())
            messages.append(str(cause.getMessage()))
            cause = cause.getCause()
        return {"error": {"python": type(e).__name__, "classes": chain, "messages": messages}}


def summary(df):
    row = df.agg(F.count("*").alias("rows"), F.sum("id").alias("id_sum"), F.max("name").alias("max_name")).first()
    return {"rows": row["rows"], "id_sum": row["id_sum"], "max_name": row["max_name"]}


def round_trip():
    df = spark.range(0, 1000, numPartitions=2).withColumn("name", F.concat(F.lit("row-"), F.col("id").cast("string")))
    df.write.mode("overwrite").parquet(url)
    return summary(spark.read.parquet(url))


result = {
    "round_trip": attempt(round_trip),
    "wrong_secret_read": attempt(lambda: summary(spark.read.options(**WRONG).parquet(url))),
    "wrong_secret_write": attempt(lambda: spark.range(10).write.options(**WRONG).parquet(url + "-wrong") or "written"),
}
print("S3-RESULT " + json.dumps(result), flush=True)
spark.stop()
