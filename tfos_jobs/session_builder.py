"""Build the SparkSession every job uses. The master comes from spark-submit when it set one."""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import Mapping

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from tfos_jobs import resources
from tfos_jobs.config import SparkConfig
from tfos_jobs.config.spark import LOG_LEVEL
from tfos_jobs.errors import ConfigError
from tfos_jobs.tf_import import LEGACY_KERAS
from tfos_jobs.worker_python import is_local

TFRECORD_JAR = Path(__file__).parent / "jars" / "tfos-tfrecord.jar"
# TensorFlow Java (scripts/tfjava-jars.txt) beside it: the prediction function scoring in the JVM (`udfs.jvm_engine`)
# adds them to a cluster's application when it is registered; a local master's executor is the driver's JVM, whose
# class path is fixed at start, so they are on it from the start there.
TFJAVA_JARS = Path(__file__).parent / "jars" / "tfjava"
# Spark's Kafka connector, as `make setup` fetches it into a source checkout (scripts/kafka-jars.txt).
KAFKA_JARS = Path(__file__).parent / "jars" / "kafka"
KAFKA_CONNECTOR = "spark-sql-kafka-0-10"
JAR_LISTS = ("spark.jars", "spark.jars.packages")
# Where spark-submit puts --jars: spark.jars for standalone, Kubernetes and local masters, and on
# YARN spark.yarn.dist.jars (in client mode the driver's class path gets them too).
SUBMITTED_JARS = ("spark.jars", "spark.yarn.dist.jars")


# Fixed environment of the driver and every executor, set before Python imports TensorFlow:
# tf-keras for TFoS, and pandas-on-Arrow without the timezone warning.
FIXED_ENV = {**LEGACY_KERAS, "PYARROW_IGNORE_TIMEZONE": "1"}


PLUGINS = "spark.plugins"
# The jar's executor plugin: a fresh executor loads and runs once, in the background, what the
# first task of a Python function over a DataFrame does first (docs/tuning.md, item 14d).
WARM_UP_PLUGIN = "tfos.spark.cluster.WarmUpPlugin"


def executor_settings(*given: Mapping[str, str]) -> dict[str, str]:
    """Spark settings of every executor the package starts (a session of its own, its Spark
    Connect server): its environment and its Python workers' daemon (`python_daemon`),
    unless `given` (the user's settings) set them, and its warm-up after the plugins they name."""
    from tfos_jobs import python_daemon

    ours = {python_daemon.SETTING: python_daemon.MODULE,
            **{f"spark.executorEnv.{k}": v for k, v in runtime_env().items()}}
    plugins = [p for settings in given for p in _listed(settings.get(PLUGINS, ""))]
    return {**ours, **{k: v for settings in given for k, v in settings.items() if k in ours},
            PLUGINS: ",".join(dict.fromkeys([*plugins, WARM_UP_PLUGIN]))}


def runtime_env() -> dict[str, str]:
    """Environment the driver and every executor need: the same Python, and FIXED_ENV."""
    return {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        **FIXED_ENV,
    }


def tfrecord_jar() -> Path:
    if not TFRECORD_JAR.exists():
        raise ConfigError(f"the TFRecord data source jar {str(TFRECORD_JAR)!r} is missing; build it with `make setup`")
    return TFRECORD_JAR


def started_by_spark_submit() -> bool:
    """Whether spark-submit started this driver's JVM (before Python), with its own settings."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def with_kafka_connector(spark_cfg: SparkConfig) -> SparkConfig:
    """`spark_cfg` with the Kafka connector jars of a source checkout, unless the connector is
    given already (packages or jars) or spark-submit started the driver (it takes --packages)."""
    given = [*spark_cfg.packages, *spark_cfg.jars, *_listed(spark_cfg.conf.get("spark.jars", "")),
             *_listed(spark_cfg.conf.get("spark.jars.packages", ""))]
    if started_by_spark_submit() or any(KAFKA_CONNECTOR in g for g in given):
        return spark_cfg
    return dataclasses.replace(spark_cfg, jars=(*spark_cfg.jars, *sorted(str(p) for p in KAFKA_JARS.glob("*.jar"))))


DEFAULT_LOG_LEVEL = "WARN"
VERBOSE_LEVELS = ("INFO", "DEBUG", "TRACE", "ALL")
# The JVM option naming a log4j2 configuration; a user's own (in extraJavaOptions) wins over ours.
LOG4J2_OPTION = "-Dlog4j2.configurationFile="
# Python loggers that print a line per connection or font cache at INFO, once a library (TFoS)
# sets the root logger to INFO.
CHATTY_PYTHON_LOGGERS = ("py4j", "matplotlib")


REMOTE_VARIABLE = "SPARK_REMOTE"  # pyspark's own: the Spark Connect server a client uses


def remote_url(spark_cfg: SparkConfig) -> str:
    """The Spark Connect server to use: `spark.remote`, else SPARK_REMOTE; "" for a driver of our own."""
    return spark_cfg.remote or os.environ.get(REMOTE_VARIABLE, "")


def build(spark_cfg: SparkConfig, extra_conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session configured from `[spark]`, with the TFRecord jar and runtime env on every executor
    (or a Spark Connect client's session, with `spark.remote`: `connect`).

    Spark logs through the package's quiet console profile at WARN and draws stage bars only on
    a terminal; `spark.log.level` = INFO or finer (`--verbose`) gives Spark's own profile back."""
    if remote_url(spark_cfg):
        return connect(spark_cfg, extra_conf)
    # PYSPARK_PYTHON must be in the driver's environment before the context starts: setting
    # spark.pyspark.python on the builder does not reach executors in every deploy mode.
    os.environ.update(runtime_env())
    submitted = started_by_spark_submit()
    if submitted:
        SparkContext._ensure_initialized()  # so that SparkConf() sees spark-submit's settings
    conf = SparkConf()
    jars, packages = _jar_lists(conf, spark_cfg, submitted)
    # A name given to spark-submit (--name) is the one the cluster manager already shows (YARN in
    # cluster mode cannot change it); without one spark-submit uses the script's file name.
    given = conf.get("spark.app.name", "") if submitted else ""
    builder = SparkSession.builder.appName(given if given and not given.endswith(".py") else spark_cfg.app_name)
    if not submitted:  # the master is spark-submit's when it started the driver
        builder = builder.master(spark_cfg.master or "local[*]")
    hive = _hive_settings(spark_cfg) if spark_cfg.hive else {}
    configured = {**dict(spark_cfg.conf), **dict(extra_conf or {})}
    level = (conf.get(LOG_LEVEL, "") if submitted else "") or configured.get(LOG_LEVEL, DEFAULT_LOG_LEVEL)
    verbose = level.upper() in VERBOSE_LEVELS
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": str(sys.stderr.isatty()).lower(),
        **hive,
        **configured,
        **executor_settings(*([dict(conf.getAll())] if submitted else []), configured),
        # spark-submit started the driver with its own profile; executors are the cluster's
        **console_settings(configured, hive, master=spark_cfg.master, profile=not (verbose or submitted)),
        "spark.jars": ",".join(dict.fromkeys(jars)),
        **({} if submitted else _local_class_path(spark_cfg.master or "local[*]", configured)),
    }
    if packages:
        settings["spark.jars.packages"] = ",".join(dict.fromkeys(packages))
    if spark_cfg.hive:
        builder = builder.enableHiveSupport()
    if not submitted:
        # Start the driver JVM with every setting first. spark-submit adds the jars that the
        # packages resolve to into spark.jars there; setting the jar lists again on the session
        # below would drop them again, and executors would miss the packages' classes.
        launch = SparkConf(loadDefaults=False).setMaster(spark_cfg.master or "local[*]").setAppName(spark_cfg.app_name)
        SparkContext._ensure_initialized(conf=launch.setAll(list(settings.items())))
    for key, value in settings.items():
        if not submitted and key in JAR_LISTS:
            continue  # given at launch (above)
        if submitted and key not in (*JAR_LISTS, PLUGINS) and conf.contains(key):
            continue  # what was given to spark-submit (--conf, spark-defaults.conf) wins over the config
        builder = builder.config(key, value)
    spark = _started(builder, yarn=(conf.get("spark.master", "") if submitted else spark_cfg.master or "") == "yarn")
    spark.sparkContext.setLogLevel(level)
    if not verbose:
        for name in CHATTY_PYTHON_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    return spark


# What a Connect client sets on its session (the server's cluster has the rest, as it started).
CONNECT_SETTINGS = {"spark.sql.session.timeZone": "UTC"}


def connect(spark_cfg: SparkConfig, extra_conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark Connect client's session on `remote_url(spark_cfg)`: no JVM here. The server brings
    the cluster, the package's jar and the executors' Python (docs/operations.md, Spark Connect);
    of `conf` only what a session may change at run time is set, and the rest is named on stderr."""
    url = remote_url(spark_cfg)
    if not url.startswith("sc://"):
        raise ConfigError(f"spark.remote (or {REMOTE_VARIABLE}): {url!r} is not a Spark Connect URL (sc://host:port)")
    # This process may still run TensorFlow (the local strategy, the model's check): as a driver's would.
    os.environ.update({k: v for k, v in runtime_env().items() if k != "PYSPARK_PYTHON"})
    spark = SparkSession.builder.remote(url).getOrCreate()
    kept = []
    for key, value in {**CONNECT_SETTINGS, **dict(spark_cfg.conf), **dict(extra_conf or {})}.items():
        try:
            spark.conf.set(key, value)
        except Exception:  # a static or core setting: the server's own applies
            kept.append(key)
    if kept:
        print(f"tfos: the Spark Connect server keeps its own {', '.join(sorted(kept))} (settings a session cannot "
              "change; give them to the server when it starts)", file=sys.stderr)
    return spark


def console_settings(given: Mapping[str, str], hive: Mapping[str, str], *, master: str | None,
                     profile: bool) -> dict[str, str]:
    """The JVM options of the driver and executors: the embedded metastore's and those given in the config, merged, plus
    (with `profile`) the package's log4j2 profile for the driver and for executors on this machine (local masters: they
    can read the file). A log4j2 configuration the user names wins."""
    path = resources.log4j2_profile()
    option = f'{LOG4J2_OPTION}"{path}"' if any(c.isspace() for c in path) else f"{LOG4J2_OPTION}{path}"
    local = master is None or is_local(master)  # its executors read the profile from the driver's disk
    merged = {}
    for key, ours in (("spark.driver.extraJavaOptions", profile), ("spark.executor.extraJavaOptions", profile and local)):
        options = [o for o in (hive.get(key, ""), given.get(key, "")) if o]
        if ours and not any(LOG4J2_OPTION in o for o in options):
            options.append(option)
        if options:
            merged[key] = " ".join(dict.fromkeys(options))
    return merged


# Spark's UI can fail to start on YARN when the application master's proxy filter (AmIpFilter)
# arrives while the UI's handlers are being started: Jetty's ServletHandler.initialize then
# throws ConcurrentModificationException. Nothing of the application ran yet: start again once.
UI_FILTER_RACE = ("java.util.ConcurrentModificationException", "ServletHandler")
UI_RACE_RETRY = "tfos: Spark's UI failed to start (a known race with YARN's proxy filter); starting again"


def is_ui_filter_race(error: BaseException | str) -> bool:
    """Whether a failed SparkContext start is the UI's filter race (and only that)."""
    text = str(error)
    return all(marker in text for marker in UI_FILTER_RACE)


def _started(builder: SparkSession.Builder, *, yarn: bool) -> SparkSession:
    try:
        return builder.getOrCreate()
    except Exception as e:
        if not (yarn and is_ui_filter_race(e)):
            raise
        print(UI_RACE_RETRY, file=sys.stderr)
        active = SparkContext._active_spark_context
        if active is not None:  # what the failed start left behind
            active.stop()
        return builder.getOrCreate()


def jars_given_to_submit(conf: SparkConf) -> list[str]:
    """The jars spark-submit's --jars put on the driver and executors, wherever this cluster manager records them."""
    return [j for key in SUBMITTED_JARS for j in _listed(conf.get(key, ""))]


def _listed(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _local_class_path(master: str, configured: Mapping[str, str]) -> dict[str, str]:
    """A local master's driver class path with TensorFlow Java's jars (see TFJAVA_JARS)."""
    from tfos_jobs.worker_python import executors_in_driver

    if not executors_in_driver(master):
        return {}
    key = "spark.driver.extraClassPath"
    jars = [str(p) for p in sorted(TFJAVA_JARS.glob("*.jar"))]
    given = [p for p in configured.get(key, "").split(os.pathsep) if p]
    return {key: os.pathsep.join(dict.fromkeys([*given, *jars]))} if jars else {}


def _jar_lists(conf: SparkConf, spark_cfg: SparkConfig, submitted: bool) -> tuple[list[str], list[str]]:
    """The session's jars and packages: those given in `conf` and `spark.conf`, and under a driver of our own the
    TFRecord jar and `[spark]`'s. spark-submit's driver JVM is already running: a jar added now would reach the
    executors but not the driver, so it must have come with --jars (or --packages)."""
    jars = _listed(conf.get("spark.jars", "")) + _listed(spark_cfg.conf.get("spark.jars", ""))
    packages = _listed(conf.get("spark.jars.packages", "")) + _listed(spark_cfg.conf.get("spark.jars.packages", ""))
    if submitted:
        missing = _missing_on_submit(jars_given_to_submit(conf), packages, spark_cfg)
        if missing:
            raise ConfigError(f"spark-submit was run without {'; '.join(missing)} "
                              "(`tfos submit` and scripts/tfos-submit add the TFRecord jar for you)")
        return jars, packages
    ours = [str(tfrecord_jar()), *(str(Path(j).resolve()) for j in spark_cfg.jars)]
    for j in spark_cfg.jars:
        if not Path(j).is_file():
            raise ConfigError(f"spark.jars: {j!r} is not a file")
    return jars + ours, packages + list(spark_cfg.packages)


def _missing_on_submit(jars: list[str], packages: list[str], spark_cfg: SparkConfig) -> list[str]:
    names = {Path(j).name for j in jars}
    missing = [] if TFRECORD_JAR.name in names else [f"the TFRecord data source jar: add --jars {tfrecord_jar()}"]
    missing += [f"spark.jars {j!r}: add --jars {j}" for j in spark_cfg.jars if Path(j).name not in names]
    missing += [f"spark.packages {p!r}: add --packages {p}" for p in spark_cfg.packages if p not in packages]
    return missing


def _hive_settings(spark_cfg: SparkConfig) -> dict[str, str]:
    """An embedded Derby metastore and warehouse under `warehouse`, unless the user's metastore
    is configured (hive-site.xml in the Spark or Hive conf dir, or a metastore URI)."""
    conf_dirs = [os.environ.get("SPARK_CONF_DIR"), os.environ.get("HIVE_CONF_DIR")]
    if "spark.hadoop.hive.metastore.uris" in spark_cfg.conf or any(
            d and (Path(d) / "hive-site.xml").is_file() for d in conf_dirs):
        return {}
    root = Path(spark_cfg.warehouse).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return {
        "spark.sql.warehouse.dir": str(root),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={root / 'metastore_db'};create=true",
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={root}",  # derby.log beside the metastore
    }


def settle_console(spark: SparkSession) -> None:
    """Before a result is printed: Spark's stage bar is drawn from the status listener's view,
    which trails the job's end, so a bar can appear after the job returned. Wait for that view
    to catch up, then clear the bar. (A Spark Connect client draws no bar of Spark's.)"""
    from tfos_jobs import sessions

    if sessions.is_connect(spark):
        sys.stderr.flush()
        return
    context = spark.sparkContext._jsc.sc()
    bar = context.progressBar()
    if bar.isDefined():
        context.listenerBus().waitUntilEmpty()
        bar.get().finishAll()
    sys.stderr.flush()
