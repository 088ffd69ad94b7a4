"""Generating the data, and prepare at two sizes (P5a, P10)."""
from __future__ import annotations

import dataclasses
from typing import Callable

from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample, timed
from tfos_jobs.config import Config
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.data import dataset, synthetic


def generate(bench: Bench) -> None:
    for scale, cfg in (("1x", bench.small), ("16x", bench.big)):
        syn = cfg.synthetic
        counts = synthetic.generate(bench.spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
        bench.say(f"  {scale}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        bench.run.facts[f"raw {scale}"] = counts
    small, big = bench.run.facts["raw 1x"], bench.run.facts["raw 16x"]
    bench.run.sizes["raw rows (people + events), 1x / 16x"] = (
        f"{small['people'] + small['events']:,} / {big['people'] + big['events']:,}")


def prepare_scaling(bench: Bench) -> None:
    from tfos_jobs.jobs import prepare

    def variant(cfg: Config) -> Callable[[], Sample]:
        return lambda: {"seconds": timed(lambda: prepare.run(bench.spark, cfg, overwrite=True, log=lambda _: None))}

    if bench.sizes.warmup:
        bench.say("  prepare: warm-up 1x and 16x")
        for cfg in (bench.small, bench.big):
            prepare.run(bench.spark, cfg, overwrite=True, log=lambda _: None)
    out = bench.repeat("prepare", {"1x": variant(bench.small), "16x": variant(bench.big)}, warmup=False)
    for scale, cfg in (("1x", bench.small), ("16x", bench.big)):
        splits = dataset.read(cfg.prepare.output).manifest.splits
        bench.run.facts[f"records {scale}"] = {k: v.records for k, v in splits.items()}
    r1, r16 = bench.run.facts["records 1x"], bench.run.facts["records 16x"]
    bench.run.sizes["prepared records train + eval, 1x / 16x"] = (
        f"{r1[Split.TRAIN]:,} + {r1[Split.EVAL]:,} / {r16[Split.TRAIN]:,} + {r16[Split.EVAL]:,}")
    bench.run.results.append(Result(
        "P5a", "prepare time at 16x rows vs 1x rows",
        Figure("prepare at 16x", "s", out["16x"]["seconds"]), Figure("prepare at 1x", "s", out["1x"]["seconds"]),
        16.0, "<="))


def prepare_once(bench: Bench) -> None:
    """The 1x and 16x datasets, for a stage run alone that reads them (P16)."""
    from tfos_jobs.jobs import prepare

    for cfg in (bench.small, bench.big):
        prepare.run(bench.spark, cfg, overwrite=True, log=lambda _: None)


def windowing_scaling(bench: Bench) -> None:
    """The sample fleet config's prepare (read per-asset files, cut windows, write
    SequenceExamples) on 16x the assets vs 1x."""
    from tfos_jobs import config as config_mod, resources
    from tfos_jobs.data import fleet
    from tfos_jobs.jobs import prepare

    s = bench.sizes
    base = config_mod.load(resources.config_path("fleet"))
    bench.spark.conf.set("spark.sql.session.timeZone", base.spark.conf.get("spark.sql.session.timeZone", "UTC"))
    cfgs, rows = {}, {}
    for scale, assets in (("1x", s.fleet_assets), ("16x", s.fleet_assets * s.scale)):
        raw = f"{bench.work}/fleet-raw-{scale}"
        counts = fleet.generate(raw, assets, s.fleet_steps, base.fleet.seed,
                                step_seconds=base.features.time.step_seconds,
                                csv_every=min(base.fleet.csv_every, assets))  # some CSV at every size
        rows[scale] = counts["rows"]
        sources = {n: dataclasses.replace(src, path=f"{raw}/{fleet.SENSORS_DIR}") for n, src in base.sources.items()}
        cfgs[scale] = dataclasses.replace(base, sources=sources, prepare=dataclasses.replace(
            base.prepare, output=f"{bench.work}/fleet-dataset-{scale}", overwrite=True))

    def variant(cfg: Config) -> Callable[[], Sample]:
        return lambda: {"seconds": timed(lambda: prepare.run(bench.spark, cfg, overwrite=True, log=lambda _: None))}

    out = bench.repeat("windows", {"1x": variant(cfgs["1x"]), "16x": variant(cfgs["16x"])})
    windows = {scale: dataset.read(cfg.prepare.output).manifest.windows["kept"] for scale, cfg in cfgs.items()}
    bench.run.sizes["sensor rows (assets x steps x 8 sensors), 1x / 16x"] = (
        f"{rows['1x']:,} ({s.fleet_assets} x {s.fleet_steps:,}) / {rows['16x']:,} "
        f"({s.fleet_assets * s.scale} x {s.fleet_steps:,}); windows {windows['1x']:,} / {windows['16x']:,}")
    bench.run.results.append(Result(
        "P10", "sensor windows: prepare (per-asset files -> windows -> SequenceExamples) at 16x rows vs 1x rows",
        Figure("windows at 16x", "s", out["16x"]["seconds"]), Figure("windows at 1x", "s", out["1x"]["seconds"]),
        16.0, "<="))
