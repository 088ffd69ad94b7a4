"""Build the SparkSession every job uses. The master comes from spark-submit when it set one."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from tfos_jobs.config import SparkConfig
from tfos_jobs.errors import ConfigError

TFRECORD_JAR = Path(__file__).parent / "jars" / "tfos-tfrecord.jar"


def runtime_env() -> dict[str, str]:
    """Environment the driver and every executor need: the same Python, and tf-keras for TFoS."""
    return {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        "PYARROW_IGNORE_TIMEZONE": "1",
    }


def tfrecord_jar() -> Path:
    if not TFRECORD_JAR.exists():
        raise ConfigError(
            f"the TFRecord data source jar {str(TFRECORD_JAR)!r} is missing; build it with `make setup`"
        )
    return TFRECORD_JAR


def build(spark_cfg: SparkConfig, extra_conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session configured from `[spark]`, with the TFRecord jar and runtime env on every executor."""
    env = runtime_env()
    # PYSPARK_PYTHON must be in the driver's environment before the context starts: setting
    # spark.pyspark.python on the builder does not reach executors in every deploy mode.
    os.environ.update(env)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the driver JVM first
    if submitted:
        SparkContext._ensure_initialized()  # so that SparkConf() sees spark-submit's settings
    conf = SparkConf()
    builder = SparkSession.builder.appName(spark_cfg.app_name)
    jars = [j for j in conf.get("spark.jars", "").split(",") if j]
    if submitted:
        # The driver JVM is already running: a jar added now would reach the executors but
        # not the driver, so it must come with --jars. The master is spark-submit's.
        if not any(Path(j).name == TFRECORD_JAR.name for j in jars):
            raise ConfigError(
                f"spark-submit was run without the TFRecord data source jar: add --jars {tfrecord_jar()} "
                "(scripts/tfos-submit does this for you)"
            )
    else:
        builder = builder.master(spark_cfg.master or "local[*]")
        jars.append(str(tfrecord_jar()))
    settings = {
        "spark.jars": ",".join(jars),
        "spark.sql.session.timeZone": "UTC",
        **{f"spark.executorEnv.{k}": v for k, v in env.items()},
        **dict(spark_cfg.conf),
        **dict(extra_conf or {}),
    }
    for key, value in settings.items():
        if submitted and key != "spark.jars" and conf.contains(key):
            continue  # what was given to spark-submit (--conf, spark-defaults.conf) wins over the config
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
