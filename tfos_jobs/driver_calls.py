"""Calls on the driver, from a classic session or a Spark Connect client alike.

A Connect client has no JVM and no SparkContext, yet some things only the driver can do: Hadoop's FileSystem with the
session's configuration, what the cluster looks like, which tasks of a job failed, the prediction function's argument
check, the relay of the TF nodes' control channel. The package's jar answers them as a data source
(`format("tfos-driver")`, `tfos.spark.cluster.DriverCalls`): the call and its arguments go in the options, the answer
comes back in the schema, when the driver analyses the plan. No task runs, so a call is answered while a TF cluster
holds every executor. This module owns the call names; the jar matches them.

    from tfos_jobs import driver_calls
    driver_calls.call(spark, driver_calls.CLUSTER_INFO)["executors"]
"""
from __future__ import annotations

import json
import uuid
from typing import Any

SOURCE = "tfos-driver"
ANSWER_KEY = "tfos"

# Hadoop's FileSystem (`path`, `src`/`dst`, `offset`/`length`, `data` base64 with `last`)
FS_QUALIFY = "fs.qualify"
FS_EXISTS = "fs.exists"
FS_STATUS = "fs.status"  # {"size", "modified" (ms), "dir"} or None
FS_LIST = "fs.list"  # [{"name", "size", "dir"}] of the entries directly in a directory
FS_TREE = "fs.tree"  # [[path relative to the directory, size]] of every file below it
FS_DATA_FILES = "fs.data_files"  # the data files Spark reads at a path, qualified
FS_MKDIRS = "fs.mkdirs"
FS_DELETE = "fs.delete"
FS_RENAME = "fs.rename"
FS_READ = "fs.read"  # base64
FS_WRITE = "fs.write"  # chunks in order from offset 0; `last` closes the file
# The cluster
CLUSTER_INFO = "cluster.info"  # {"master", "app_id", "executors", "default_parallelism", "driver_host", "spark_version"}
CLUSTER_CONF = "cluster.conf"  # a setting of the driver's SparkConf (`key`), or None
# jobs tagged `tag`: {"failed_tasks", "errors": {partition: message}, "attempts": [[partition, attempt, message]]}
JOB_FAILURES = "jobs.failures"
JOB_TASKS = "jobs.tasks"  # the tasks of the first stage of the jobs tagged `tag`
UDF_CHECK = "udf.check"  # wrap the function `name` with the check of its arguments (`inputs`, JSON)
# register `name` (and `counted_name`) scoring in the executor JVM by `plan` (`udfs.jvm_engine`), checked by `inputs`
UDF_JVM = "udf.jvm"
UDF_JVM_COUNTS = "udf.jvm.counts"  # the counters of the JVM function `name` over this session's queries
# The control channel's relay (`cluster.driver.relay`)
RELAY_OPEN = "relay.open"  # `token` (hex), `ports` (the first free; 0: any) -> {"id", "host", "port"}
RELAY_EXCHANGE = "relay.exchange"  # `id`, `out` [[conn, base64 or None]], `wait_ms` -> {"events": [[kind, conn, data]]}
RELAY_CLOSE = "relay.close"

CALLS = (FS_QUALIFY, FS_EXISTS, FS_STATUS, FS_LIST, FS_TREE, FS_DATA_FILES, FS_MKDIRS, FS_DELETE, FS_RENAME, FS_READ,
         FS_WRITE, CLUSTER_INFO, CLUSTER_CONF, JOB_FAILURES, JOB_TASKS, UDF_CHECK, UDF_JVM,
         UDF_JVM_COUNTS, RELAY_OPEN, RELAY_EXCHANGE, RELAY_CLOSE)


class DriverCallError(OSError):
    """The driver could not do what was asked; the message starts with the Java exception's class."""

    def __init__(self, message: str, java_class: str = ""):
        super().__init__(message)
        self.java_class = java_class


class MissingJar(DriverCallError):
    """The session's driver does not have the package's jar (no `tfos-driver` data source)."""


def call(spark: Any, name: str, /, **args: Any) -> Any:
    """The driver's answer to `name` with `args` (plain JSON values). Raises `DriverCallError`
    (a FileNotFoundError when the Java exception says the path is missing)."""
    if name not in CALLS:
        raise ValueError(f"no driver call named {name!r}")
    reader = spark.read.format(SOURCE).option("call", name).option("args", json.dumps(args))
    try:  # a fresh option each time: a plan cache must never answer a call
        schema = reader.option("nonce", uuid.uuid4().hex).load().schema
    except Exception as e:
        text = str(e)
        if "tfos-driver" in text and ("DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text):
            raise MissingJar("the Spark driver does not have the package's jar (tfos-tfrecord.jar): start it with "
                             "--jars <site-packages>/tfos_jobs/jars/tfos-tfrecord.jar") from None
        raise
    answer = json.loads(schema.fields[0].metadata[ANSWER_KEY])
    if answer.get("ok"):
        return answer.get("value")
    java_class, message = str(answer.get("class", "")), str(answer.get("error", ""))
    if java_class.endswith("FileNotFoundException"):
        raise FileNotFoundError(message)
    raise DriverCallError(message, java_class)
