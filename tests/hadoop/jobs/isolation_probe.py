"""Submitted to the isolated cluster by tests/hadoop/test_infra.py; prints one PROBE-RESULT JSON line:
what each executor sees of a file the driver wrote under /tmp and of the other executors' /tmp
files, and an HDFS read and write done by the executors.

    isolation_probe.py DRIVER_FILE HDFS_IN HDFS_OUT EXECUTORS
"""
import glob
import json
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

driver_file, hdfs_in, hdfs_out, executors = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
MARK = "/tmp/tfos-probe-executor-"

spark = SparkSession.builder.appName("isolation-probe").getOrCreate()
sc = spark.sparkContext
deadline = time.time() + 120
while sc._jsc.sc().getExecutorMemoryStatus().size() < executors + 1:  # + the driver's block manager
    if time.time() > deadline:
        raise SystemExit(f"only {sc._jsc.sc().getExecutorMemoryStatus().size() - 1} of {executors} executors registered")
    time.sleep(0.5)


def executor_id() -> str:
    return os.path.basename(os.getcwd())  # an executor works in WORK_DIR/APP_ID/EXECUTOR_ID


def mark(_):
    me = executor_id()
    with open(MARK + me, "w") as f:
        f.write(me)
    time.sleep(0.5)  # so that every executor gets some of the tasks
    yield {"executor": me, "cwd": os.getcwd(), "sees_driver_file": os.path.exists(driver_file),
           "sees_venv_python": os.path.exists(sys.executable), "home": os.path.expanduser("~")}


def look(_):
    time.sleep(0.5)
    yield {"executor": executor_id(), "marks": sorted(glob.glob(MARK + "*"))}


tasks = 4 * executors
marked = sc.parallelize(range(tasks), tasks).mapPartitions(mark).collect()
looked = sc.parallelize(range(tasks), tasks).mapPartitions(look).collect()

people = spark.read.parquet(hdfs_in)  # the executors read what the test wrote to HDFS
summary = people.agg(F.count("*").alias("rows"), F.sum("age").alias("age_sum")).first()
(people.withColumn("age_next_year", F.col("age") + 1)
       .repartition(executors)
       .write.mode("overwrite").parquet(hdfs_out))  # and write their own output there

print("PROBE-RESULT " + json.dumps({
    "driver_sees_driver_file": os.path.exists(driver_file),
    "driver_home": os.path.expanduser("~"),
    "driver_sees_marks": sorted(glob.glob(MARK + "*")),
    "marked": marked,
    "looked": looked,
    "hdfs_rows": summary["rows"],
    "hdfs_age_sum": summary["age_sum"],
}), flush=True)
spark.stop()
