"""The benchmark's shared state: its configs and sizes, the Spark session of the moment, how a
stage is timed and a comparison repeated, and everything the report needs (`Run`). The stages
are functions of a `Bench` (benchmarks/stages/), run in order by `benchmarks.run.run_all`.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.sql import SparkSession

from tfos_jobs import api
from tfos_jobs.user_code import package_zip
from tfos_jobs.config.serve_sql import ServeSqlConfig
from tfos_jobs.jobs.serve import sql_server
from benchmarks import ROOT
from benchmarks.harness import Figure, Log, Result, Sample, interleave
from benchmarks.sizes import Sizes
from tfos_jobs.config import Config
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.topology import examples_per_step


SERVED_MODEL = "model-mwms-2"  # P4 and P5 serve the model the last two-worker run trained
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",  # takes effect when the first session starts the JVM
    "spark.sql.execution.arrow.pyspark.enabled": "true",  # toPandas of P4's rows
}


@dataclass
class Run:
    """Everything the report needs."""

    results: list[Result] = field(default_factory=list)
    details: dict[str, Figure] = field(default_factory=dict)
    sizes: dict[str, str] = field(default_factory=dict)
    stages: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def one_value_a_row(config: Config) -> Config:
    """`config` without its texts, lists and vectors (and the aggregates' columns only they use): the scoring stages
    compare the UDF with baselines that take one value a row (`serving_codes`, predict_batch_udf, MLflow's spark_udf)."""
    kept = tuple(f for f in config.features.features if f.kind not in ("text", "list", "vector"))
    names = {f.name for f in kept}
    aggregates = tuple(dataclasses.replace(a, columns={n: e for n, e in a.columns.items() if n in names})
                       for a in config.prepare.aggregates)
    return dataclasses.replace(config, features=FeatureSpec(kept).check(), prepare=dataclasses.replace(
        config.prepare, aggregates=tuple(a for a in aggregates if a.columns)))


def bench_config(config: Config, sizes: Sizes, work: str, scale: str) -> Config:
    """`config` pointed at the bench's own data under `work`: raw tables, dataset, model; one value a row."""
    config = one_value_a_row(config)
    root = config.synthetic.output.rstrip("/")
    prep = config.prepare
    needed = [prep.main, *(lk.source for lk in prep.lookups), *([prep.activity.source] if prep.activity else []),
              *(a.source for a in prep.aggregates)]
    for name in needed:
        path = config.sources[name].path or ""
        if not (path == root or path.startswith(root + "/")):
            raise ConfigError(f"sources.{name}.path: tfos bench generates its own data, so every source prepare "
                              f"reads must lie under synthetic.output ({root!r}); got {path!r}")
    raw = f"{work}/raw-{scale}"
    sources = {name: dataclasses.replace(src, path=raw + src.path[len(root):])
               if src.path and (src.path == root or src.path.startswith(root + "/")) else src
               for name, src in config.sources.items()}
    people = sizes.people if scale == "1x" else sizes.big_people
    return dataclasses.replace(
        config, sources=sources,
        synthetic=dataclasses.replace(config.synthetic, output=raw, people=people,
                                      events_per_person=sizes.events_per_person),
        prepare=dataclasses.replace(prep, output=f"{work}/dataset-{scale}", overwrite=True),
        train=dataclasses.replace(config.train, dataset=f"{work}/dataset-{scale}", model_dir=f"{work}/model",
                                  epochs=sizes.train_epochs, steps_per_epoch=sizes.train_steps, workers=1, ps=1,
                                  batch_size=sizes.train_batch, profile_steps=sizes.profile_steps,
                                  tensorboard=False, early_stopping_patience=0),
        predict=dataclasses.replace(config.predict, model=f"{work}/{SERVED_MODEL}",
                                    output=f"{work}/predictions-{scale}"),
    )


class Bench:
    """What every stage works with; each appends its results to `run`."""

    def __init__(self, config: Config, sizes: Sizes, work: str, log: Log, *, spark_master: str, tfos_master: str,
                 p14_master: str, remote: str | None = None):
        self.sizes, self.work, self.log, self.remote = sizes, work, log, remote
        self.spark_master, self.tfos_master, self.p14_master = spark_master, tfos_master, p14_master
        if not sizes.train_batch:  # P7 at the demo's own global batch
            batch = examples_per_step(config.train.strategy, config.train.batch_size, config.train.workers)
            self.sizes = sizes = dataclasses.replace(sizes, train_batch=batch)
        self.small = bench_config(config, sizes, work, "1x")
        self.big = bench_config(config, sizes, work, "16x")
        self.spark_conf = {**config.spark.conf, **SPARK_CONF}
        # Read only when the first session starts the JVM, which every later one reuses: P13's
        # HiveServer2 needs the package's jar there (sql_server.session_conf).
        self.spark_conf[sql_server.DRIVER_CLASS_PATH] = sql_server.session_conf(
            ServeSqlConfig(), config.spark.conf)[sql_server.DRIVER_CLASS_PATH]
        self.app_name = f"{config.spark.app_name}-bench"
        self.spark: SparkSession | None = None
        self.run = Run()
        self.started = time.time()

    # -- plumbing ----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.log(f"[{time.time() - self.started:6.0f} s] {text}")

    def session(self, master: str, extra_conf: dict[str, str] | None = None) -> SparkSession:
        """A fresh session on `master`; the previous one is stopped first."""
        self.stop()
        self.say(f"Spark session on {master}")
        conf = {**self.spark_conf, **(extra_conf or {})}
        # The jars of the JVM are those of the first session, which every later one reuses: P15's
        # Kafka connector comes with each, so that it is there whichever session starts the JVM.
        self.spark = api.session(master=master, app_name=self.app_name, conf=conf, kafka=True)
        # Some of the bench's own functions run in Spark's Python workers (the per-row writer, the
        # baselines' UDFs): the package travels to them as user code does (tfos_jobs.user_code).
        self.spark.sparkContext.addPyFile(package_zip(ROOT / "benchmarks", "benchmarks"))
        return self.spark

    def stop(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None

    def stage(self, name: str, fn: Callable[[], None]) -> None:
        self.say(f"== {name}")
        started = time.time()
        fn()
        self.run.stages[name] = time.time() - started

    def indented(self, text: str) -> None:
        """What the jobs themselves print (per-epoch lines), indented under the progress lines."""
        for line in text.splitlines():
            self.log(f"      {line}")

    def repeat(self, label: str, variants: dict[str, Callable[[], Sample]], *, warmup: bool | None = None,
               repeats: int | None = None):
        return interleave(label, variants, repeats or self.sizes.repeats, self.say,
                          warmup=self.sizes.warmup if warmup is None else warmup)


def cleanup(work: str) -> None:
    if os.path.isdir(work):
        shutil.rmtree(work, ignore_errors=True)

