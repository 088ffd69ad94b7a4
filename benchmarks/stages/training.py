"""Training: the local strategy against TF clusters of each shape (P3, P6, P7, P8, the scaling
table), and from a Hadoop filesystem (P11), with the model fetch from there."""
from __future__ import annotations

import dataclasses
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample
from tfos_jobs.contracts.epoch_line import EXAMPLES_PER_SEC
from tfos_jobs.topology import ALL_GATHER, ALL_REDUCE, AUTO, Role, Strategy


RING_VARIANT = "mwms-2-all-reduce"  # two workers summing their gradients with the ring all-reduce
GATHER_VARIANT = "mwms-2-all-gather"  # ... with one all-gather (the exchange before the mesh)
LOCAL = Strategy.LOCAL.value  # the training variant every other is measured against
STEP_PARTS = ("step_ms", "compute_ms", "exchange_ms", "other_ms", "input_ms")


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
        how = {ALL_REDUCE: ", ring all-reduce", ALL_GATHER: ", all-gather"}.get(self.gradient_exchange, "")
        return (f"TFoS multi_worker_mirrored, {self.workers} worker{'s' if self.workers > 1 else ''} "
                f"({self.batch:,} per worker{how})")


def training_variants(bench: Bench) -> dict[str, TrainVariant]:
    """The scaling table's runs, in its order. Each trains the same model with `train_batch`
    examples per update (the demo's global batch; a parameter-server step is one worker's
    batch), against the local strategy on as many. Two workers (whose "auto" exchange is the
    workers' mesh) also run with the all-gather and with the ring all-reduce (the exchanges
    before it, `model.exchange`) and, with the local strategy beside
    them, at half the batch (the per-worker batch before the batch recipe of docs/training.md). The
    parameter-server cluster uses `ps_batch`: the per-step batch docs/training.md recommends under
    parameter_server, where every step pays a round trip to the parameter servers; its
    baseline is the local strategy at that batch ("local" again when both batches are equal)."""
    g, big = bench.sizes.train_batch, bench.sizes.ps_batch
    local, half, for_ps = LOCAL, f"{LOCAL}-half", f"{LOCAL}-{Role.PS}"
    variants = {local: TrainVariant(Strategy.LOCAL, 1, g, local)}
    for n in bench.sizes.scaling_workers:
        variants[f"mwms-{n}"] = TrainVariant(Strategy.MULTI_WORKER_MIRRORED, n, g // n, local)
        if n == 2:
            variants[GATHER_VARIANT] = TrainVariant(Strategy.MULTI_WORKER_MIRRORED, 2, g // 2, local, ALL_GATHER)
            variants[RING_VARIANT] = TrainVariant(Strategy.MULTI_WORKER_MIRRORED, 2, g // 2, local, ALL_REDUCE)
    if 2 in bench.sizes.scaling_workers:
        variants[half] = TrainVariant(Strategy.LOCAL, 1, g // 2, half)
        variants["mwms-2-half"] = TrainVariant(Strategy.MULTI_WORKER_MIRRORED, 2, g // 4, half)
    if big != g:
        variants[for_ps] = TrainVariant(Strategy.LOCAL, 1, big, for_ps)
    variants[f"{Role.PS}-2"] = TrainVariant(Strategy.PARAMETER_SERVER, 2, big, for_ps if big != g else local)
    return variants


def training(bench: Bench) -> None:
    from tfos_jobs.jobs.train.driver import job as train

    def variant(name: str, v: TrainVariant) -> Callable[[], Sample]:
        def once() -> Sample:
            tr = dataclasses.replace(bench.small.train, strategy=v.strategy, workers=v.workers, batch_size=v.batch,
                                     model_dir=f"{bench.work}/model-{name}", gradient_exchange=v.gradient_exchange)
            metrics = train.run(bench.spark, dataclasses.replace(bench.small, train=tr), overwrite=True, log=bench.indented)
            steady = metrics["history"][1:] or metrics["history"]  # the first epoch traces the functions
            sample = {"examples_per_sec": statistics.fmean(e[EXAMPLES_PER_SEC] for e in steady),
                      "seconds": metrics["seconds"]}
            sample.update({k: v for k, v in (metrics["step_profile"] or {}).items() if k in STEP_PARTS})
            if v.strategy != Strategy.LOCAL:
                sample.update(metrics["startup"])
            return sample
        return once

    tr, variants = bench.small.train, training_variants(bench)
    bench.run.sizes["training"] = (
        f"1x train split, {tr.epochs} epochs x {tr.steps_per_epoch} steps of {bench.sizes.train_batch:,} examples "
        f"(the demo's global batch; per worker {', '.join(f'{n} {v.batch}' for n, v in variants.items())}); "
        f"figures from epochs 2-{tr.epochs} (the first traces), training time only (validation apart); "
        f"{bench.sizes.train_repeats} repeats")
    bench.run.facts["training baselines"] = {name: v.baseline for name, v in variants.items()}
    out = bench.repeat("training", {name: variant(name, v) for name, v in variants.items()},
                      warmup=False, repeats=bench.sizes.train_repeats)
    rate = {name: Figure(v.title, "examples/s", out[name]["examples_per_sec"]) for name, v in variants.items()}
    local = rate[LOCAL]
    bench.run.results.append(Result(
        "P3", "training examples/s: TFoS with 1 worker vs the local strategy (same data, model, batch)",
        rate["mwms-1"], local, 0.9, ">="))
    bench.run.results.append(Result(
        "P7", f"training examples/s: TFoS, 2 multi_worker_mirrored workers vs the local strategy (same data, "
              f"model, global batch: {bench.sizes.train_batch:,}, the demo's; at half of it see the scaling table)",
        rate["mwms-2"], local, 0.8, ">="))
    bench.run.results.append(Result(
        "P8", "training examples/s: TFoS, parameter_server with 2 workers and 1 ps vs the local strategy "
              f"(same data, model, examples per update: {bench.sizes.ps_batch:,}, the parameter-server batch the "
              "training guide recommends)",
        rate[f"{Role.PS}-2"], rate[variants[f"{Role.PS}-2"].baseline], 0.5, ">="))
    for name in variants:
        bench.run.details[f"train {name}"] = rate[name]
        for part in STEP_PARTS:
            if part in out[name]:
                bench.run.details[f"step {name} {part}"] = Figure(part, "ms", out[name][part])
    bench.run.details["train tfos"] = rate["mwms-2"]
    bench.run.details["train local"] = local
    for name in variants:
        for key in ("to_reserved_seconds", "to_first_step_seconds"):
            if out[name].get(key):
                bench.run.details[f"startup {name} {key}"] = Figure(key, "s", out[name][key])
    bench.run.details["startup reserved"] = Figure("reservation server start to all nodes reserved", "s",
                                                  out["mwms-2"].get("to_reserved_seconds", []))
    bench.run.results.append(Result(
        "P6", "TFoS cluster start, 2 workers (the demo's cluster): reservation to first training step "
              "(the slowest run counts; other cluster shapes in the scaling table)",
        Figure("reservation to first step", "s", out["mwms-2"].get("to_first_step_seconds", [])),
        None, 15.0, "<=", worst=True))


def remote_training(bench: Bench) -> None:
    """The demo's two-worker training with the 1x dataset on a Hadoop filesystem (`--remote`,
    e.g. HDFS) against the same dataset on local files: the nodes get their shards through
    Spark either way, so the epochs should not differ; what the remote copy adds is the
    fetch before the first step. Then how long serving takes to fetch the model from there."""
    from tfos_jobs.jobs.train.driver import job as train
    from tfos_jobs.storage import Storage

    storage = Storage(bench.spark)
    remote = f"{storage.qualify(bench.remote)}/tfos-bench-{os.getpid()}"
    storage.delete(remote)
    storage.replace_dir(bench.small.train.dataset, f"{remote}/dataset")
    datasets = {"local files": bench.small.train.dataset, "remote": f"{remote}/dataset"}

    def variant(name: str) -> Callable[[], Sample]:
        def once() -> Sample:
            tr = dataclasses.replace(bench.small.train, strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                                     batch_size=bench.sizes.train_batch // 2, dataset=datasets[name],
                                     model_dir=f"{remote}/model" if name == "remote" else f"{bench.work}/model-p11")
            metrics = train.run(bench.spark, dataclasses.replace(bench.small, train=tr), overwrite=True,
                                log=bench.indented)
            steady = metrics["history"][1:] or metrics["history"]
            return {"examples_per_sec": statistics.fmean(e[EXAMPLES_PER_SEC] for e in steady),
                    "seconds": metrics["seconds"], **metrics["startup"]}
        return once

    out = bench.repeat("training from a Hadoop filesystem", {name: variant(name) for name in datasets},
                      warmup=False, repeats=bench.sizes.train_repeats)
    rate = {name: Figure(f"dataset on {name}", "examples/s", out[name]["examples_per_sec"]) for name in datasets}
    bench.run.results.append(Result(
        "P11", f"training examples/s: the dataset on {bench.remote.split(':', 1)[0]} vs on local files (2 "
               "multi_worker_mirrored workers, the shards reach the nodes through Spark both ways)",
        rate["remote"], rate["local files"], 0.9, ">="))
    for name in datasets:
        bench.run.details[f"P11 {name} seconds"] = Figure(f"whole run, dataset on {name}", "s", out[name]["seconds"])
        bench.run.details[f"P11 {name} first step"] = Figure(
            f"control server start to first step, dataset on {name}", "s", out[name].get("to_first_step_seconds", []))
    model_fetch(bench, f"{remote}/model")
    storage.delete(remote)


def model_fetch(bench: Bench, model_dir: str) -> None:
    """A model on the remote filesystem registered for SQL (the driver fetches, checks and
    ships it) and scored on one row by a fresh executor (it fetches the archive and loads the
    model), then scored again (warm): the difference is the executor's fetch and load."""
    from tfos_jobs.contracts.serving import SAVED_MODEL_FILE
    from tfos_jobs.features.spec import CategoricalFeature
    from tfos_jobs.storage import Storage
    from udfs import register

    storage = Storage(bench.spark)
    registered, first, warm = [], [], []
    for n in range(bench.sizes.repeats):
        started = time.perf_counter()
        udf = register(bench.spark, f"bench_remote_{n}", model_dir)
        registered.append(time.perf_counter() - started)
        features = [udf.spec.get(name) for name in udf.spec.model_inputs]
        row = bench.spark.createDataFrame([tuple(f.default if isinstance(f, CategoricalFeature) else float(f.default)
                                                for f in features)], list(udf.spec.model_inputs))
        for times in (first, warm):
            started = time.perf_counter()
            row.select(udf()).collect()
            times.append(time.perf_counter() - started)
        # the next repeat: a new version of the model (a new archive to fetch) in new Python workers
        graph = f"{udf.export_dir}/{SAVED_MODEL_FILE}"
        storage.write_bytes(graph, storage.read_bytes(graph))
        bench.spark.sparkContext.environment["TFOS_BENCH_FETCH"] = str(n)
    bench.run.details["model fetch driver"] = Figure("register: fetch to the driver, check, ship", "s", registered)
    bench.run.details["model fetch executor"] = Figure(
        "first query on an executor minus a warm one: fetch the archive, load the model", "s",
        [a - b for a, b in zip(first, warm)])
