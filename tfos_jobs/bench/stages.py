"""The benchmark run: generate the data, then measure each stage against its baseline.

Three Spark sessions, one after the other, in this one process:
  1. `local[2]`: generate the 1x and 16x data sets, prepare both (P5), write the prepared
     records three ways (P1, P2), and read them with tf.data in this driver (input pipeline);
  2. `local-cluster[4,1,MB]`: TFoS needs one executor per TF node; the `local` baseline
     trains in this driver while the executors idle, against TF clusters of 1, 2 and 3
     multi_worker_mirrored workers and a parameter-server cluster, all on the same global
     batch (P3, P6, P7, P8, scaling);
  3. `local[2]` again: the SQL UDF against the in-process model call (P4), SQL at 1x and
     16x (P5).
Every figure of one comparison comes from the same session, alternating repeat by repeat.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession

from tfos_jobs import session as session_mod
from tfos_jobs.bench import cpu, pipeline, serving, writers
from tfos_jobs.bench.harness import Figure, Log, Result, Sample, interleave, timed
from tfos_jobs.bench.sizes import Sizes
from tfos_jobs.config import Config, SparkConfig
from tfos_jobs.data import dataset
from tfos_jobs.data import synthetic
from tfos_jobs.data.assemble import assemble
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import SPARK_TYPES
from tfos_jobs.topology import ALL_REDUCE, AUTO, Strategy, examples_per_step

SERVED_MODEL = "model-mwms-2"  # P4 and P5 serve the model the last two-worker run trained
RING_VARIANT = "mwms-2-all-reduce"  # two workers summing their gradients with the ring all-reduce
STEP_PARTS = ("step_ms", "compute_ms", "exchange_ms", "other_ms", "input_ms")
WRITE_PARTITIONS = 8
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",  # takes effect when the first session starts the JVM
    "spark.sql.execution.arrow.pyspark.enabled": "true",  # toPandas of P4's rows
}


@dataclass(frozen=True)
class TrainVariant:
    """One run shape of the scaling table."""

    strategy: str
    workers: int
    batch: int  # per worker; under parameter_server per step, each step on one worker
    baseline: str  # the local variant that updates with as many examples per step
    gradient_exchange: str = AUTO

    @property
    def title(self) -> str:
        if self.strategy == Strategy.LOCAL:
            return f"local strategy, one process (batch {self.batch:,})"
        if self.strategy == Strategy.PARAMETER_SERVER:
            return f"TFoS parameter_server, {self.workers} workers + 1 ps (batch {self.batch:,} per step)"
        how = ", ring all-reduce" if self.gradient_exchange == ALL_REDUCE else ""
        return (f"TFoS multi_worker_mirrored, {self.workers} worker{'s' if self.workers > 1 else ''} "
                f"({self.batch:,} per worker{how})")


@dataclass
class Run:
    """Everything the report needs."""

    results: list[Result] = field(default_factory=list)
    details: dict[str, Figure] = field(default_factory=dict)
    sizes: dict[str, str] = field(default_factory=dict)
    stages: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def bench_config(cfg: Config, sizes: Sizes, work: str, scale: str) -> Config:
    """`cfg` pointed at the bench's own data under `work`: raw tables, dataset, model."""
    root = cfg.synthetic.output.rstrip("/")
    prep = cfg.prepare
    needed = [prep.main, *(lk.source for lk in prep.lookups), *([prep.activity.source] if prep.activity else [])]
    for name in needed:
        path = cfg.sources[name].path or ""
        if not (path == root or path.startswith(root + "/")):
            raise ConfigError(f"sources.{name}.path: tfos bench generates its own data, so every source prepare "
                              f"reads must lie under synthetic.output ({root!r}); got {path!r}")
    raw = f"{work}/raw-{scale}"
    sources = {name: dataclasses.replace(src, path=raw + src.path[len(root):])
               if src.path and (src.path == root or src.path.startswith(root + "/")) else src
               for name, src in cfg.sources.items()}
    people = sizes.people if scale == "1x" else sizes.big_people
    return dataclasses.replace(
        cfg, sources=sources,
        synthetic=dataclasses.replace(cfg.synthetic, output=raw, people=people, events_per_person=sizes.events_per_person),
        prepare=dataclasses.replace(prep, output=f"{work}/dataset-{scale}", overwrite=True),
        train=dataclasses.replace(cfg.train, dataset=f"{work}/dataset-{scale}", model_dir=f"{work}/model",
                                  epochs=sizes.train_epochs, steps_per_epoch=sizes.train_steps, workers=1, ps=1,
                                  batch_size=sizes.train_batch, profile_steps=sizes.profile_steps,
                                  tensorboard=False, early_stopping_patience=0),
        predict=dataclasses.replace(cfg.predict, model=f"{work}/{SERVED_MODEL}", output=f"{work}/predictions-{scale}"),
    )


class Bench:
    """Runs the stages in order; each appends its results to `self.run`."""

    def __init__(self, cfg: Config, sizes: Sizes, work: str, log: Log, *, spark_master: str, tfos_master: str,
                 remote: str | None = None):
        self.sizes, self.work, self.log, self.remote = sizes, work, log, remote
        self.spark_master, self.tfos_master = spark_master, tfos_master
        if not sizes.train_batch:  # P7 at the demo's own global batch
            batch = examples_per_step(cfg.train.strategy, cfg.train.batch_size, cfg.train.workers)
            self.sizes = sizes = dataclasses.replace(sizes, train_batch=batch)
        self.small = bench_config(cfg, sizes, work, "1x")
        self.big = bench_config(cfg, sizes, work, "16x")
        self.spark_conf = {**cfg.spark.conf, **SPARK_CONF}
        self.app_name = f"{cfg.spark.app_name}-bench"
        self.spark: SparkSession | None = None
        self.run = Run()
        self.started = time.time()

    # -- plumbing ----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.log(f"[{time.time() - self.started:6.0f} s] {text}")

    def session(self, master: str) -> SparkSession:
        """A fresh session on `master`; the previous one is stopped first."""
        self.stop()
        self.say(f"Spark session on {master}")
        self.spark = session_mod.build(SparkConfig(master=master, app_name=self.app_name, conf=self.spark_conf))
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

    # -- the run -----------------------------------------------------------------------------

    def all(self) -> Run:
        s = self.sizes
        self.run.sizes["people (1x / 16x)"] = f"{s.people:,} / {s.big_people:,}"
        self.run.sizes["events per person"] = f"{s.events_per_person:g}"
        self.run.sizes["repeats per figure"] = f"{s.repeats}, training {s.train_repeats}, P4 and P9 {s.serving_repeats}" + (
            " (after one unrecorded warm-up run of each variant; none for training, where each TFoS run's "
            "start-up is a P6 sample)" if s.warmup else "")
        try:
            self.session(self.spark_master)
            self.stage("generate", self.generate)
            self.stage("P5 prepare at 1x and 16x", self.prepare_scaling)
            self.stage("P10 sensor windows at 1x and 16x", self.windowing_scaling)
            self.stage("P1 P2 record writes", self.writes)
            self.stage("input pipeline", self.input_pipeline)
            self.session(self.tfos_master)
            self.stage("P3 P6 P7 P8 training and scaling", self.training)
            if self.remote:
                self.stage("P11 training from a Hadoop filesystem", self.remote_training)
            self.session(self.spark_master)
            self.stage("P4 P5 P9 serving", self.serving)
            self.stage("tfos predict vs a Parquet write", self.predict_vs_write)
        finally:
            self.stop()
        self.run.results.sort(key=lambda r: r.id)
        return self.run

    def generate(self) -> None:
        for scale, cfg in (("1x", self.small), ("16x", self.big)):
            syn = cfg.synthetic
            counts = synthetic.generate(self.spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
            self.say(f"  {scale}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
            self.run.facts[f"raw {scale}"] = counts
        small, big = self.run.facts["raw 1x"], self.run.facts["raw 16x"]
        self.run.sizes["raw rows (people + events), 1x / 16x"] = (
            f"{small['people'] + small['events']:,} / {big['people'] + big['events']:,}")

    def prepare_scaling(self) -> None:
        from tfos_jobs.jobs import prepare

        def variant(cfg: Config) -> Callable[[], Sample]:
            return lambda: {"seconds": timed(lambda: prepare.run(self.spark, cfg, overwrite=True, log=lambda _: None))}

        if self.sizes.warmup:
            self.say("  prepare: warm-up 1x and 16x")
            for cfg in (self.small, self.big):
                prepare.run(self.spark, cfg, overwrite=True, log=lambda _: None)
        out = self.repeat("prepare", {"1x": variant(self.small), "16x": variant(self.big)}, warmup=False)
        for scale, cfg in (("1x", self.small), ("16x", self.big)):
            splits = dataset.read(cfg.prepare.output).manifest.splits
            self.run.facts[f"records {scale}"] = {k: v.records for k, v in splits.items()}
        r1, r16 = self.run.facts["records 1x"], self.run.facts["records 16x"]
        self.run.sizes["prepared records train + eval, 1x / 16x"] = (
            f"{r1['train']:,} + {r1['eval']:,} / {r16['train']:,} + {r16['eval']:,}")
        self.run.results.append(Result(
            "P5a", "prepare time at 16x rows vs 1x rows",
            Figure("prepare at 16x", "s", out["16x"]["seconds"]), Figure("prepare at 1x", "s", out["1x"]["seconds"]),
            16.0, "<="))

    def windowing_scaling(self) -> None:
        """The sample fleet config's prepare (read per-asset files, cut windows, write
        SequenceExamples) on 16x the assets vs 1x."""
        from tfos_jobs import config as config_mod
        from tfos_jobs import resources
        from tfos_jobs.data import fleet
        from tfos_jobs.jobs import prepare

        s = self.sizes
        base = config_mod.load(resources.config_path("fleet"))
        self.spark.conf.set("spark.sql.session.timeZone", base.spark.conf.get("spark.sql.session.timeZone", "UTC"))
        cfgs, rows = {}, {}
        for scale, assets in (("1x", s.fleet_assets), ("16x", s.fleet_assets * s.scale)):
            raw = f"{self.work}/fleet-raw-{scale}"
            counts = fleet.generate(raw, assets, s.fleet_steps, base.fleet.seed,
                                    step_seconds=base.features.time.step_seconds,
                                    csv_every=min(base.fleet.csv_every, assets))  # some CSV at every size
            rows[scale] = counts["rows"]
            sources = {n: dataclasses.replace(src, path=f"{raw}/{fleet.SENSORS_DIR}") for n, src in base.sources.items()}
            cfgs[scale] = dataclasses.replace(base, sources=sources, prepare=dataclasses.replace(
                base.prepare, output=f"{self.work}/fleet-dataset-{scale}", overwrite=True))

        def variant(cfg: Config) -> Callable[[], Sample]:
            return lambda: {"seconds": timed(lambda: prepare.run(self.spark, cfg, overwrite=True, log=lambda _: None))}

        out = self.repeat("windows", {"1x": variant(cfgs["1x"]), "16x": variant(cfgs["16x"])})
        windows = {scale: dataset.read(cfg.prepare.output).manifest.windows["kept"] for scale, cfg in cfgs.items()}
        self.run.sizes["sensor rows (assets x steps x 8 sensors), 1x / 16x"] = (
            f"{rows['1x']:,} ({s.fleet_assets} x {s.fleet_steps:,}) / {rows['16x']:,} "
            f"({s.fleet_assets * s.scale} x {s.fleet_steps:,}); windows {windows['1x']:,} / {windows['16x']:,}")
        self.run.results.append(Result(
            "P10", "sensor windows: prepare (per-asset files -> windows -> SequenceExamples) at 16x rows vs 1x rows",
            Figure("windows at 16x", "s", out["16x"]["seconds"]), Figure("windows at 1x", "s", out["1x"]["seconds"]),
            16.0, "<="))

    def records_frame(self) -> DataFrame:
        """The 16x data set's records, as prepare wrote them, cached: the DataFrame P1 and P2 write."""
        meta = dataset.read(self.big.prepare.output)
        schema = ", ".join(f"`{n}` {SPARK_TYPES[c['dtype']]}" for n, c in meta.spec.record_schema().items())
        return self.spark.read.format(self.big.prepare.tfrecord_format).schema(schema) \
            .load([meta.split_dir("train"), meta.split_dir("eval")]).repartition(WRITE_PARTITIONS).cache()

    def writes(self) -> None:
        df = self.records_frame()
        rows = df.count()
        fmt_name = self.big.prepare.tfrecord_format
        self.run.sizes["P1 P2 DataFrame"] = (
            f"{rows:,} rows x {len(df.columns)} columns (the 16x records), {WRITE_PARTITIONS} partitions, cached; "
            f"a Parquet or TFRecord sample writes it {self.sizes.write_rounds} times, a Python-writer sample once")
        kinds: dict[str, Callable[[DataFrame, str], Any]] = {
            "parquet": writers.write_parquet,
            "tfrecord": lambda d, p: writers.write_tfrecord(d, p, fmt_name),
            "python": writers.write_python_rows,
        }

        def once(kind: str, frame: DataFrame, n: int, rounds: int = 1) -> Sample:
            """`rounds` writes of `frame`, each into a new directory (deleted afterwards, untimed)."""
            seconds = 0.0
            for _ in range(rounds):
                path = f"{self.work}/writes/{kind}-{uuid.uuid4().hex[:8]}"
                started = time.perf_counter()
                written = kinds[kind](frame, path)
                seconds += time.perf_counter() - started
                shutil.rmtree(path, ignore_errors=True)
                if written is not None and written != n:
                    raise RuntimeError(f"the {kind} writer wrote {written} of {n} rows")
            return {"rows_per_sec": rounds * n / seconds}

        if self.sizes.warmup:  # start the Python workers, import TF in them, warm the JIT: on a 2% sample
            sample = df.sample(fraction=0.02, seed=1).cache()
            n = sample.count()
            for kind in kinds:
                self.say(f"  writes: warm-up {kind}")
                once(kind, sample, n)
            sample.unpersist()
        rounds = {"parquet": self.sizes.write_rounds, "tfrecord": self.sizes.write_rounds, "python": 1}
        out = self.repeat("writes", {k: (lambda k=k: once(k, df, rows, rounds[k])) for k in kinds}, warmup=False)
        df.unpersist()
        tfrecord = Figure("TFRecord data source", "rows/s", out["tfrecord"]["rows_per_sec"])
        self.run.results.append(Result(
            "P1", "prepare: TFRecord write via the data source vs Parquet write of the same DataFrame",
            tfrecord, Figure("Parquet", "rows/s", out["parquet"]["rows_per_sec"]), 0.8, ">="))
        self.run.results.append(Result(
            "P2", "TFRecord write via the data source vs a Python per-row writer (TFoS dfutil's tf.train.Example per Row)",
            tfrecord, Figure("Python per-row writer", "rows/s", out["python"]["rows_per_sec"]), 10.0, ">="))

    def input_pipeline(self) -> None:
        meta = dataset.read(self.big.prepare.output)
        files, spec, batch = meta.files("train"), meta.spec, self.big.train.batch_size
        builders = {"in memory": pipeline.in_memory, "batch then parse": pipeline.batch_then_parse,
                    "parse then batch": pipeline.parse_then_batch}

        batches = max(1, self.sizes.input_records // batch)

        def variant(build) -> Callable[[], Sample]:
            return lambda: {"records_per_sec": pipeline.records_per_sec(
                build(files, spec, batch, meta.compression), batches, batch)}

        self.run.sizes["input pipeline"] = (f"{batches} batches of {batch:,} from the 16x train split "
                                            f"({len(files)} files), in the driver")
        out = self.repeat("input pipeline", {name: variant(b) for name, b in builders.items()})
        for name in builders:
            self.run.details[f"input {name}"] = Figure(f"tf.data, {name}", "records/s", out[name]["records_per_sec"])

    def training_variants(self) -> dict[str, TrainVariant]:
        """The scaling table's runs, in its order. Each trains the same model with `train_batch`
        examples per update (the demo's global batch; a parameter-server step is one worker's
        batch), against the local strategy on as many. Two workers also run with the ring
        all-reduce (the exchange before `model.exchange`) and, with the local strategy beside
        them, at half the batch (the per-worker batch before the README's recipe). The
        parameter-server cluster uses `ps_batch`: the per-step batch the README recommends under
        parameter_server, where every step pays a round trip to the parameter servers; its
        baseline is the local strategy at that batch ("local" again when both batches are equal)."""
        g, big = self.sizes.train_batch, self.sizes.ps_batch
        variants = {"local": TrainVariant(Strategy.LOCAL, 1, g, "local")}
        for n in self.sizes.scaling_workers:
            variants[f"mwms-{n}"] = TrainVariant(Strategy.MULTI_WORKER_MIRRORED, n, g // n, "local")
            if n == 2:
                variants[RING_VARIANT] = TrainVariant(Strategy.MULTI_WORKER_MIRRORED, 2, g // 2, "local", ALL_REDUCE)
        if 2 in self.sizes.scaling_workers:
            variants["local-half"] = TrainVariant(Strategy.LOCAL, 1, g // 2, "local-half")
            variants["mwms-2-half"] = TrainVariant(Strategy.MULTI_WORKER_MIRRORED, 2, g // 4, "local-half")
        if big != g:
            variants["local-ps"] = TrainVariant(Strategy.LOCAL, 1, big, "local-ps")
        variants["ps-2"] = TrainVariant(Strategy.PARAMETER_SERVER, 2, big, "local-ps" if big != g else "local")
        return variants

    def training(self) -> None:
        from tfos_jobs.jobs.train.driver import job as train

        def variant(name: str, v: TrainVariant) -> Callable[[], Sample]:
            def once() -> Sample:
                tr = dataclasses.replace(self.small.train, strategy=v.strategy, workers=v.workers, batch_size=v.batch,
                                         model_dir=f"{self.work}/model-{name}", gradient_exchange=v.gradient_exchange)
                metrics = train.run(self.spark, dataclasses.replace(self.small, train=tr), overwrite=True, log=self.indented)
                steady = metrics["history"][1:] or metrics["history"]  # the first epoch traces the functions
                sample = {"examples_per_sec": statistics.fmean(e["examples_per_sec"] for e in steady),
                          "seconds": metrics["seconds"]}
                sample.update({k: v for k, v in (metrics["step_profile"] or {}).items() if k in STEP_PARTS})
                if v.strategy != Strategy.LOCAL:
                    sample.update(metrics["startup"])
                return sample
            return once

        tr, variants = self.small.train, self.training_variants()
        self.run.sizes["training"] = (
            f"1x train split, {tr.epochs} epochs x {tr.steps_per_epoch} steps of {self.sizes.train_batch:,} examples "
            f"(the demo's global batch; per worker {', '.join(f'{n} {v.batch}' for n, v in variants.items())}); "
            f"figures from epochs 2-{tr.epochs} (the first traces), training time only (validation apart); "
            f"{self.sizes.train_repeats} repeats")
        self.run.facts["training baselines"] = {name: v.baseline for name, v in variants.items()}
        out = self.repeat("training", {name: variant(name, v) for name, v in variants.items()},
                          warmup=False, repeats=self.sizes.train_repeats)
        rate = {name: Figure(v.title, "examples/s", out[name]["examples_per_sec"]) for name, v in variants.items()}
        local = rate["local"]
        self.run.results.append(Result(
            "P3", "training examples/s: TFoS with 1 worker vs the local strategy (same data, model, batch)",
            rate["mwms-1"], local, 0.9, ">="))
        self.run.results.append(Result(
            "P7", f"training examples/s: TFoS, 2 multi_worker_mirrored workers vs the local strategy (same data, "
                  f"model, global batch: {self.sizes.train_batch:,}, the demo's; at half of it see the scaling table)",
            rate["mwms-2"], local, 0.8, ">="))
        self.run.results.append(Result(
            "P8", "training examples/s: TFoS, parameter_server with 2 workers and 1 ps vs the local strategy "
                  f"(same data, model, examples per update: {self.sizes.ps_batch:,}, the parameter-server batch the "
                  "README recommends)",
            rate["ps-2"], rate[variants["ps-2"].baseline], 0.5, ">="))
        for name in variants:
            self.run.details[f"train {name}"] = rate[name]
            for part in STEP_PARTS:
                if part in out[name]:
                    self.run.details[f"step {name} {part}"] = Figure(part, "ms", out[name][part])
        self.run.details["train tfos"] = rate["mwms-2"]
        self.run.details["train local"] = local
        for name in variants:
            for key in ("to_reserved_seconds", "to_first_step_seconds"):
                if out[name].get(key):
                    self.run.details[f"startup {name} {key}"] = Figure(key, "s", out[name][key])
        self.run.details["startup reserved"] = Figure("reservation server start to all nodes reserved", "s",
                                                      out["mwms-2"].get("to_reserved_seconds", []))
        self.run.results.append(Result(
            "P6", "TFoS cluster start, 2 workers (the demo's cluster): reservation to first training step "
                  "(the slowest run counts; other cluster shapes in the scaling table)",
            Figure("reservation to first step", "s", out["mwms-2"].get("to_first_step_seconds", [])),
            None, 15.0, "<=", worst=True))

    def remote_training(self) -> None:
        """The demo's two-worker training with the 1x dataset on a Hadoop filesystem (`--remote`,
        e.g. HDFS) against the same dataset on local files: the nodes get their shards through
        Spark either way, so the epochs should not differ; what the remote copy adds is the
        fetch before the first step. Then how long serving takes to fetch the model from there."""
        from tfos_jobs.jobs.train.driver import job as train
        from tfos_jobs.storage import Storage

        storage = Storage(self.spark)
        remote = f"{storage.qualify(self.remote)}/tfos-bench-{os.getpid()}"
        storage.delete(remote)
        storage.replace_dir(self.small.train.dataset, f"{remote}/dataset")
        datasets = {"local files": self.small.train.dataset, "remote": f"{remote}/dataset"}

        def variant(name: str) -> Callable[[], Sample]:
            def once() -> Sample:
                tr = dataclasses.replace(self.small.train, strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                                         batch_size=self.sizes.train_batch // 2, dataset=datasets[name],
                                         model_dir=f"{remote}/model" if name == "remote" else f"{self.work}/model-p11")
                metrics = train.run(self.spark, dataclasses.replace(self.small, train=tr), overwrite=True,
                                    log=self.indented)
                steady = metrics["history"][1:] or metrics["history"]
                return {"examples_per_sec": statistics.fmean(e["examples_per_sec"] for e in steady),
                        "seconds": metrics["seconds"], **metrics["startup"]}
            return once

        out = self.repeat("training from a Hadoop filesystem", {name: variant(name) for name in datasets},
                          warmup=False, repeats=self.sizes.train_repeats)
        rate = {name: Figure(f"dataset on {name}", "examples/s", out[name]["examples_per_sec"]) for name in datasets}
        self.run.results.append(Result(
            "P11", f"training examples/s: the dataset on {self.remote.split(':', 1)[0]} vs on local files (2 "
                   "multi_worker_mirrored workers, the shards reach the nodes through Spark both ways)",
            rate["remote"], rate["local files"], 0.9, ">="))
        for name in datasets:
            self.run.details[f"P11 {name} seconds"] = Figure(f"whole run, dataset on {name}", "s", out[name]["seconds"])
            self.run.details[f"P11 {name} first step"] = Figure(
                f"control server start to first step, dataset on {name}", "s", out[name].get("to_first_step_seconds", []))
        self.model_fetch(f"{remote}/model")
        storage.delete(remote)

    def model_fetch(self, model_dir: str) -> None:
        """A model on the remote filesystem registered for SQL (the driver fetches, checks and
        ships it) and scored on one row by a fresh executor (it fetches the archive and loads the
        model), then scored again (warm): the difference is the executor's fetch and load."""
        from tfos_jobs.contracts.serving import SAVED_MODEL_FILE
        from tfos_jobs.features.spec import CategoricalFeature
        from tfos_jobs.storage import Storage
        from udfs import register

        storage = Storage(self.spark)
        registered, first, warm = [], [], []
        for n in range(self.sizes.repeats):
            started = time.perf_counter()
            udf = register(self.spark, f"bench_remote_{n}", model_dir)
            registered.append(time.perf_counter() - started)
            features = [udf.spec.get(name) for name in udf.spec.model_inputs]
            row = self.spark.createDataFrame([tuple(f.default if isinstance(f, CategoricalFeature) else float(f.default)
                                                    for f in features)], list(udf.spec.model_inputs))
            for times in (first, warm):
                started = time.perf_counter()
                row.select(udf()).collect()
                times.append(time.perf_counter() - started)
            # the next repeat: a new version of the model (a new archive to fetch) in new Python workers
            graph = f"{udf.export_dir}/{SAVED_MODEL_FILE}"
            storage.write_bytes(graph, storage.read_bytes(graph))
            self.spark.sparkContext.environment["TFOS_BENCH_FETCH"] = str(n)
        self.run.details["model fetch driver"] = Figure("register: fetch to the driver, check, ship", "s", registered)
        self.run.details["model fetch executor"] = Figure(
            "first query on an executor minus a warm one: fetch the archive, load the model", "s",
            [a - b for a, b in zip(first, warm)])

    def serving(self) -> None:
        import udfs
        from udfs.predict import settle_heap
        from pyspark.sql.functions import ArrowUDFType, arrow_udf

        from tfos_jobs.jobs.serve import sql
        from tfos_jobs.model.export import load_signature
        from tfos_jobs.contracts.serving import CODES_SIGNATURE, udf_return_type

        spark, pr = self.spark, self.big.predict
        udf = udfs.register(spark, pr.name, pr.model, batch_size=pr.batch_size)
        spec, task = udf.spec, udf.spec.label.task
        with_spec = dataclasses.replace(self.big, features=spec)
        table, _ = assemble(spark, with_spec, for_prediction=True)
        inputs = table.select(*spec.model_inputs).repartition(spark.sparkContext.defaultParallelism * 2).cache()
        rows = inputs.count()
        inputs.createOrReplaceTempView("bench_inputs")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            spark.udf.register("bench_noop", arrow_udf(serving.make_noop(task), udf_return_type(task),
                                                         ArrowUDFType.SCALAR_ITER))
        spark.udf.register("bench_spark_udf", serving.spark_predict_batch_udf(udf.local_dir, spec, pr.batch_size))
        arrays = serving.numpy_inputs(inputs.toPandas(), spec)
        signature = load_signature(udf.local_dir)
        codes_signature = load_signature(udf.local_dir, CODES_SIGNATURE)
        codes = serving.codes_inputs(arrays, spec)
        settle_heap()  # the in-process side gets the heap the UDF's workers have (udfs.predict.settle_heap)
        self.run.sizes["P4 rows"] = (f"{rows:,} rows (16x people, the model's {len(spec.model_inputs)} inputs), cached, "
                                     f"Arrow batches of {pr.batch_size:,} rows")

        meter = cpu.Meter(spark)

        def measured(call: Callable[[], object]) -> Sample:
            """rows/s, and CPU seconds per 100k rows of the JVM, the Python workers and this driver."""
            wall, used = meter.around(call)
            sample = {"rows_per_sec": rows / wall}
            if meter.usable:
                sample.update({f"cpu {k}": 1e5 * v / rows for k, v in used.items()})
            return sample

        def query(function: str, args: str = "struct(*)") -> Callable[[], Sample]:
            def once() -> None:
                n = spark.sql(serving.score_sql(function, task, "bench_inputs", args)).first()["n"]
                if n != rows:
                    raise RuntimeError(f"{function} scored {n} of {rows} rows")
            return lambda: measured(once)

        columns = ", ".join(spec.model_inputs)  # as `tfos predict` and the DataFrame form call it
        out = self.repeat("SQL UDF", {
            "in-process": lambda: measured(lambda: serving.in_process_rows_per_sec(signature, arrays, pr.batch_size)),
            "in-process, serving_codes": lambda: measured(
                lambda: serving.in_process_codes_rows_per_sec(codes_signature, codes, pr.batch_size)),
            "UDF": query(pr.name, columns),
            "UDF, struct(*)": query(pr.name),
            "no-op UDF": query("bench_noop", columns),
            "predict_batch_udf": query("bench_spark_udf", columns),
        }, repeats=self.sizes.serving_repeats)
        for variant, figures in out.items():
            for key, values in figures.items():
                if key.startswith("cpu "):
                    self.run.details[f"P4 {variant} {key}"] = Figure(f"{variant}: {key[4:]}", "CPU s per 100k rows", values)
        self.run.results.append(Result(
            "P4", "SQL UDF rows/s on local[2] (the columns as arguments) vs the concrete function called in one "
                  "process (same rows, batch size)",
            Figure("SQL UDF", "rows/s", out["UDF"]["rows_per_sec"]),
            Figure("concrete function, in-process", "rows/s", out["in-process"]["rows_per_sec"]), 0.5, ">="))
        self.run.results.append(Result(
            "P9", "SQL UDF rows/s vs Spark's predict_batch_udf with the documented make_predict_fn (same SavedModel, "
                  "rows, Arrow batch size)",
            Figure("SQL UDF", "rows/s", out["UDF"]["rows_per_sec"]),
            Figure("predict_batch_udf", "rows/s", out["predict_batch_udf"]["rows_per_sec"]), 1.5, ">="))
        self.run.details["udf floor"] = Figure("no-op Arrow UDF, same input and output", "rows/s",
                                               out["no-op UDF"]["rows_per_sec"])
        self.run.details["udf struct"] = Figure("the UDF on struct(*)", "rows/s", out["UDF, struct(*)"]["rows_per_sec"])
        self.run.details["in-process codes"] = Figure("serving_codes in-process, same rows", "rows/s",
                                                      out["in-process, serving_codes"]["rows_per_sec"])

        self.batch_sweep(measured, query(pr.name, columns), signature, arrays)
        inputs.unpersist()

        def sql_variant(cfg: Config) -> Callable[[], Sample]:
            def once() -> Sample:
                started = time.perf_counter()
                sql.open_views(spark, cfg, spec)
                spark.sql(serving.score_sql(pr.name, task, sql.FEATURES_VIEW)).collect()
                return {"seconds": time.perf_counter() - started}
            return once

        small = dataclasses.replace(self.small, features=spec)
        out = self.repeat("SQL at 1x and 16x", {"1x": sql_variant(small), "16x": sql_variant(with_spec)})
        self.run.results.append(Result(
            "P5b", "SQL inference time (views over the raw tables + the UDF on every row) at 16x rows vs 1x rows",
            Figure("SQL at 16x", "s", out["16x"]["seconds"]), Figure("SQL at 1x", "s", out["1x"]["seconds"]),
            16.0, "<="))

    def predict_vs_write(self) -> None:
        """`tfos predict` (joins, scoring, write, check) against writing the same joined rows to
        Parquet without a model: what scoring adds to a job that has to run anyway."""
        from tfos_jobs.jobs.serve import predict
        from udfs.register import served_spec

        spark, cfg = self.spark, self.big
        spec = served_spec(spark, cfg.predict.model)
        with_spec = dataclasses.replace(cfg, features=spec)
        rows = assemble(spark, with_spec, for_prediction=True)[0].count()
        self.run.sizes["predict rows"] = f"{rows:,} rows (16x people joined with regions and events), Parquet out"

        def predicted() -> Sample:
            started = time.perf_counter()
            summary = predict.run(spark, cfg, overwrite=True, log=lambda _: None)
            if summary["rows"] != rows:
                raise RuntimeError(f"tfos predict wrote {summary['rows']} of {rows} rows")
            return {"rows_per_sec": rows / (time.perf_counter() - started)}

        def written() -> Sample:
            started = time.perf_counter()
            table, _ = assemble(spark, with_spec, for_prediction=True)
            table.write.mode("overwrite").parquet(f"{self.work}/joined-16x")
            return {"rows_per_sec": rows / (time.perf_counter() - started)}

        out = self.repeat("predict vs write", {"tfos predict": predicted, "Parquet write": written})
        self.run.details["predict rows"] = Figure("tfos predict", "rows/s", out["tfos predict"]["rows_per_sec"])
        self.run.details["write rows"] = Figure("Parquet write of the same joined rows, no model", "rows/s",
                                                out["Parquet write"]["rows_per_sec"])

    def batch_sweep(self, measured: Callable[[Callable[[], object]], Sample], udf_query: Callable[[], Sample],
                    signature: Any, arrays: dict[str, Any]) -> None:
        """P4 again at other Arrow batch sizes (spark.sql.execution.arrow.maxRecordsPerBatch):
        fewer, larger batches spread Spark's per-batch conversion cost over more rows."""
        spark, configured = self.spark, self.big.predict.batch_size
        variants: dict[str, Callable[[], Sample]] = {}
        for size in sorted({2_000, configured, 50_000}):
            def udf_at(size: int = size) -> Sample:
                spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(size))
                return udf_query()
            variants[f"UDF {size}"] = udf_at
            variants[f"in-process {size}"] = (
                lambda size=size: measured(lambda: serving.in_process_rows_per_sec(signature, arrays, size)))
        out = self.repeat("Arrow batch size", variants, warmup=False)
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(configured))
        for name, figures in out.items():
            self.run.details[f"batch {name}"] = Figure(name, "rows/s", figures["rows_per_sec"])
            if "cpu python workers" in figures:
                self.run.details[f"batch cpu {name}"] = Figure(name, "CPU s per 100k rows", figures["cpu python workers"])


def cleanup(work: str) -> None:
    if os.path.isdir(work):
        shutil.rmtree(work, ignore_errors=True)

