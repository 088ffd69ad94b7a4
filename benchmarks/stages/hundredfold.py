"""P14: the pipeline at 100 times the people on this machine.

People joined with their regions and events are prepared, trained on for one epoch by two
multi_worker_mirrored workers and scored (`tfos predict` of every row), at 1x and at 100x, in one
session on a `local-cluster` of two executors. At 100x each worker's share of the train split is
larger than `train.in_memory_mb`, so training reads it streaming from disk; at 1x it is held in
memory. Each step reports its time ratio (100x / 1x: linear or better is at most 100) and the peak
resident memory of the driver and of each executor (`benchmarks.memory`). The streaming input is
also measured against the in-memory one on the same 1x data (steady epochs, examples/s).

`--p14-people` sets the 1x size: the default is reduced so that the whole bench stays short;
100,000 (the demo's people) makes the 100x side the demo's data a hundred times over.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Callable

from benchmarks.context import Bench, Run, bench_config
from benchmarks.harness import Figure, Result, fmt, ratio
from benchmarks.memory import DRIVER, Peaks
from tfos_jobs.config import Config
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.contracts.epoch_line import EXAMPLES_PER_SEC
from tfos_jobs.topology import Strategy

NAME = "P14"  # its facts in the run, its plot in the report
SCALE = 100
SCALES = ("1x", f"{SCALE}x")
STEPS = ("prepare", "train", "predict")
WORKERS = 2
PATH_EPOCHS = 3  # the streaming vs in-memory comparison: the epochs after the first (which traces) count
MIB = 2**20
FILES_FACTOR = 10  # 100x the records in 10x the files, as the 1x run's files are sized
SESSION_CONF = {"spark.executor.memory": "2g"}  # each executor's heap: the joins of 100x the people


def configs(bench: Bench) -> dict[str, Config]:
    """Each scale's raw tables, dataset, model and predictions under the bench's work directory."""
    s = bench.sizes
    out = {}
    for scale, people in zip(SCALES, (s.p14_people, s.p14_people * SCALE)):
        # bench_config sizes a "1x" and a "16x" side from `people` and `scale`: with scale 1 both are `people`
        sized = dataclasses.replace(s, people=people, scale=1, events_per_person=s.p14_events_per_person)
        cfg = bench_config(bench.small, sized, bench.work, f"p14-{scale}")
        work = f"{bench.work}/p14-{scale}"
        files = cfg.prepare.files_per_split * (1 if scale == "1x" else FILES_FACTOR)
        out[scale] = dataclasses.replace(
            cfg, prepare=dataclasses.replace(cfg.prepare, files_per_split=files),
            train=dataclasses.replace(cfg.train, strategy=Strategy.MULTI_WORKER_MIRRORED, workers=WORKERS, epochs=1,
                                      steps_per_epoch=None, batch_size=bench.sizes.train_batch // WORKERS,
                                      model_dir=f"{work}/model", profile_steps=0),
            predict=dataclasses.replace(cfg.predict, model=f"{work}/model", output=f"{work}/predictions"))
    return out


def hundredfold(bench: Bench) -> None:
    from tfos_jobs.data import dataset, reader, synthetic
    from tfos_jobs.jobs import prepare
    from tfos_jobs.jobs.serve import predict
    from tfos_jobs.jobs.train.driver import job as train

    spark, cfgs = bench.spark, configs(bench)
    seconds: dict[str, dict[str, float]] = {step: {} for step in STEPS}
    peaks: dict[str, dict[str, dict[str, int]]] = {step: {} for step in STEPS}
    rows: dict[str, int] = {}

    def measure(step: str, scale: str, fn: Callable[[], Any]) -> Any:
        meter = Peaks()
        started = time.perf_counter()
        result = meter.around(fn)
        seconds[step][scale] = time.perf_counter() - started
        peaks[step][scale] = meter.peak
        bench.say(f"  {step} at {scale}: {seconds[step][scale]:.1f} s, peak " + ", ".join(
            f"{group} {size / MIB:,.0f} MiB" for group, size in sorted(meter.peak.items())))
        return result

    for scale, cfg in cfgs.items():
        syn = cfg.synthetic
        counts = synthetic.generate(spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
        rows[scale] = counts["people"]
        bench.say(f"  P14 data at {scale}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        if scale == "1x" and bench.sizes.warmup:  # the session's first jobs (workers, JIT) are not 1x's cost
            bench.say("  prepare: warm-up 1x")
            prepare.run(spark, cfg, overwrite=True, log=lambda _: None)
        measure("prepare", scale, lambda: prepare.run(spark, cfg, overwrite=True, log=lambda _: None))

    shard = {scale: reader.shard_bytes(dataset.read(cfg.train.dataset).manifest.splits[Split.TRAIN].files, WORKERS, 0)
             for scale, cfg in cfgs.items()}
    in_memory_mb = max(1, math.ceil(shard["1x"] / MIB))  # holds the 1x share; the 100x one must stream
    if shard[SCALES[1]] <= in_memory_mb * MIB:
        raise RuntimeError(f"P14: the {SCALES[1]} share ({shard[SCALES[1]]:,} bytes) fits train.in_memory_mb = "
                           f"{in_memory_mb}: raise --p14-people")
    epoch_rate: dict[str, float] = {}
    for scale, cfg in cfgs.items():
        tr = dataclasses.replace(cfg.train, in_memory_mb=in_memory_mb)
        metrics = measure("train", scale, lambda: train.run(spark, dataclasses.replace(cfg, train=tr), overwrite=True,
                                                            log=bench.indented))
        epoch_rate[scale] = metrics["history"][0][EXAMPLES_PER_SEC]
    if bench.sizes.warmup:  # the model's first load in the Python workers is not 1x's cost either
        bench.say("  predict: warm-up 1x")
        predict.run(spark, cfgs["1x"], overwrite=True, log=lambda _: None)
    for scale, cfg in cfgs.items():
        summary = measure("predict", scale, lambda: predict.run(spark, cfg, overwrite=True, log=lambda _: None))
        if summary.rows != rows[scale]:
            raise RuntimeError(f"P14: tfos predict wrote {summary.rows:,} of {rows[scale]:,} rows at {scale}")

    path_rate = input_paths(bench, cfgs["1x"], train)
    record(bench, seconds, peaks, rows, shard, in_memory_mb, epoch_rate, path_rate)


def input_paths(bench: Bench, cfg: Config, train) -> dict[str, float]:
    """Steady examples/s of the same 1x training with its share in memory and streamed from disk."""
    out = {}
    for name, mb in (("in memory", 1 << 20), ("streaming", 0)):
        tr = dataclasses.replace(cfg.train, in_memory_mb=mb, epochs=PATH_EPOCHS, steps_per_epoch=bench.sizes.train_steps,
                                 model_dir=f"{cfg.train.model_dir}-{'memory' if mb else 'streaming'}")
        metrics = train.run(bench.spark, dataclasses.replace(cfg, train=tr), overwrite=True, log=bench.indented)
        out[name] = statistics.fmean(e[EXAMPLES_PER_SEC] for e in metrics["history"][1:])
        bench.say(f"  P14 input {name}: {out[name]:,.0f} examples/s")
    return out


def record(bench: Bench, seconds: dict[str, dict[str, float]], peaks: dict[str, dict[str, dict[str, int]]],
           rows: dict[str, int], shard: dict[str, int], in_memory_mb: int, epoch_rate: dict[str, float],
           path_rate: dict[str, float]) -> None:
    big = SCALES[1]
    what = {"prepare": "tfos prepare (people joined with regions and events, split, TFRecords)",
            "train": f"one epoch of {WORKERS}-worker training, start-up and export included (1x in memory, "
                     f"{big} streaming)",
            "predict": "tfos predict of every person (joins, scoring, Parquet write, check)"}
    for i, step in enumerate(STEPS):
        bench.run.results.append(Result(
            f"P14{'abc'[i]}", f"{what[step]}: time at {big} people vs 1x ({rows[big]:,} vs {rows['1x']:,})",
            Figure(f"{step} at {big}", "s", [seconds[step][big]]), Figure(f"{step} at 1x", "s", [seconds[step]["1x"]]),
            float(SCALE), "<="))
    bench.run.results.append(Result(
        "P14d", "training examples/s with each worker's share streamed from disk vs held in memory (same 1x data, "
                f"{WORKERS} workers, steady epochs)",
        Figure("streaming", "examples/s", [path_rate["streaming"]]), Figure("in memory", "examples/s",
                                                                           [path_rate["in memory"]]), 0.5, ">="))
    driver = {scale: max(peaks[step][scale].get(DRIVER, 0) for step in STEPS) for scale in SCALES}
    bench.run.results.append(Result(
        "P14e", f"the driver's peak memory (its Python and JVM) over prepare, train and predict at {big} vs 1x",
        Figure(f"driver at {big}", "MiB", [driver[big] / MIB]), Figure("driver at 1x", "MiB", [driver["1x"] / MIB]),
        1.5, "<="))
    bench.run.facts[NAME] = {"seconds": seconds, "peaks": peaks, "rows": rows, "shard": shard,
                              "in_memory_mb": in_memory_mb, "epoch_rate": epoch_rate, "path_rate": path_rate,
                              "executor_memory": bench.spark.conf.get("spark.executor.memory", "1g")}
    bench.run.sizes["P14 people, 1x / 100x"] = f"{rows['1x']:,} / {rows[big]:,}"


def _groups(p: dict[str, Any]) -> list[str]:
    return sorted({g for step in STEPS for scale in SCALES for g in p["peaks"][step][scale]},
                  key=lambda g: (g != DRIVER, g))


def section(run: Run, image: str) -> list[str]:
    """The report's P14 table: time and peak memory per step and scale."""
    p = run.facts.get(NAME)
    if not p:
        return []
    big = SCALES[1]
    groups = _groups(p)
    lines = ["## 100x the people (P14)", "",
             f"{p['rows']['1x']:,} and {p['rows'][big]:,} people joined with their regions and events, in one session "
             f"of two executors (`spark.executor.memory` = {p['executor_memory']}, the JVM's heap; the Python processes come on top). Training reads each worker's "
             f"share of the train split in memory when it fits `train.in_memory_mb` = {p['in_memory_mb']}: "
             f"{fmt(p['shard']['1x'] / MIB)} MiB at 1x (in memory), {fmt(p['shard'][big] / MIB)} MiB at {big} "
             f"(streamed from disk). Peak resident memory: the driver is this process and its JVM; an executor is its "
             "JVM and the Python processes under it (Python workers, TF nodes). All of them live through every step, "
             "so a step's peak includes what the steps before it left resident (a JVM keeps the heap it grew to).",
             "",
             "| step | scale | seconds | ratio | " + " | ".join(f"{g} peak MiB" for g in groups) + " |",
             "|---|---|---|---|" + "---|" * len(groups)]
    for step in STEPS:
        for scale in SCALES:
            cells = [fmt(p["peaks"][step][scale].get(g, 0) / MIB) for g in groups]
            shown = fmt(ratio(p["seconds"][step][scale], p["seconds"][step]["1x"])) if scale == big else "1"
            lines.append(f"| {step} | {scale} | {fmt(p['seconds'][step][scale])} | {shown} | " + " | ".join(cells) + " |")
    lines += ["", f"The one epoch at {big} ran at {fmt(p['epoch_rate'][big])} examples/s (streaming, tracing "
                  f"included). On the 1x data, steady epochs: in memory {fmt(p['path_rate']['in memory'])}, streaming "
                  f"{fmt(p['path_rate']['streaming'])} examples/s (P14d).", "", f"![P14]({image})", ""]
    return lines


def plot(run: Run, path: str) -> str:
    """Left: each step's seconds at both scales. Right: each group's peak memory per step and scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p, big = run.facts[NAME], SCALES[1]
    groups = _groups(p)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.4))
    xs = list(range(len(STEPS)))
    for offset, scale, colour in ((-0.2, "1x", "tab:gray"), (0.2, big, "tab:blue")):
        left.bar([x + offset for x in xs], [p["seconds"][step][scale] for step in STEPS], width=0.4, color=colour,
                 label=scale)
    for x, step in zip(xs, STEPS):
        left.annotate(f"{fmt(ratio(p['seconds'][step][big], p['seconds'][step]['1x']))}x", (x + 0.2,
                      p["seconds"][step][big]), ha="center", va="bottom", fontsize=8)
    left.set_xticks(xs)
    left.set_xticklabels(STEPS)
    left.set_ylabel("seconds")
    left.set_title(f"time at 1x and {big} people (goal: at most {SCALE}x)", fontsize=10)
    left.legend(fontsize=8)
    bars = [(step, scale) for step in STEPS for scale in SCALES]
    width = 0.8 / len(groups)
    for i, group in enumerate(groups):
        right.bar([b + (i - (len(groups) - 1) / 2) * width for b in range(len(bars))],
                  [p["peaks"][step][scale].get(group, 0) / MIB for step, scale in bars], width=width, label=group)
    right.set_xticks(list(range(len(bars))))
    right.set_xticklabels([f"{step}\n{scale}" for step, scale in bars], fontsize=8)
    right.set_ylabel("peak resident MiB")
    right.set_title("peak memory: the driver and each executor", fontsize=10)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
