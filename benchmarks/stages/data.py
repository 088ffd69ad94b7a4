"""Generating the data, and prepare at two sizes (P5a, P10)."""
from __future__ import annotations

import dataclasses
from typing import Callable

from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample, timed
from tfos_jobs.config import Config
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.data import dataset, synthetic


def generate(bench: Bench, scales: tuple[str, ...] = ("1x", "16x")) -> None:
    for scale, cfg in (("1x", bench.small), ("16x", bench.big)):
        if scale not in scales:
            continue
        syn = cfg.synthetic
        counts = synthetic.generate(bench.spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
        bench.say(f"  {scale}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        bench.run.facts[f"raw {scale}"] = counts
    rows = {scale: bench.run.facts[f"raw {scale}"] for scale in scales}
    bench.run.sizes[f"raw rows (people + events), {' / '.join(rows)}"] = " / ".join(
        f"{r['people'] + r['events']:,}" for r in rows.values())


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


def prepare_once(bench: Bench, scales: tuple[str, ...] = ("1x", "16x")) -> None:
    """The datasets at `scales`, for a stage run alone that reads them (P16: both; training: 1x)."""
    from tfos_jobs.jobs import prepare

    for scale, cfg in (("1x", bench.small), ("16x", bench.big)):
        if scale in scales:
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


WIDE_SENSORS = 38  # the real server fleet's metrics per row


def wide_tables(bench: Bench) -> None:
    """Prepare's cost per sensor value on one table of `WIDE_SENSORS` sensors against the same
    rows with the sample fleet's 8 (the extra sensors derived from the 8): a wide table must
    not cost more per value than a narrow one."""
    import tomllib

    from pyspark.sql import functions as F

    from tfos_jobs import config as config_mod, resources
    from tfos_jobs.data import fleet
    from tfos_jobs.data.sensor_sources import read_rows
    from tfos_jobs.jobs import prepare

    s = bench.sizes
    with open(resources.config_path("fleet"), "rb") as fh:
        base = tomllib.load(fh)
    narrow = config_mod.from_dict(base)
    spark = bench.spark
    spark.conf.set("spark.sql.session.timeZone", narrow.spark.conf.get("spark.sql.session.timeZone", "UTC"))
    raw = f"{bench.work}/fleet-raw-wide"
    counts = fleet.generate(raw, s.fleet_assets * s.scale, s.fleet_steps, narrow.fleet.seed,
                            step_seconds=narrow.features.time.step_seconds, csv_every=narrow.fleet.csv_every)
    sources = {n: {**src, "path": f"{raw}/{fleet.SENSORS_DIR}"} for n, src in base["sources"].items()}
    rows, _ = read_rows(spark, config_mod.from_dict({**base, "sources": sources}), narrow.features)
    sensors = [f.name for f in narrow.features.sequences]
    extra = [f"metric_{i:02d}" for i in range(WIDE_SENSORS - len(sensors))]
    key, time = narrow.features.key.name, narrow.features.time.name  # type: ignore[union-attr]
    table = rows.select(key, time, *sensors, *[(F.col(sensors[i % len(sensors)]) * (1.0 + 0.01 * i)).alias(name)
                                               for i, name in enumerate(extra)])
    table.write.mode("overwrite").parquet(f"{raw}/wide")

    def config(columns: list[str], name: str) -> Config:
        features = {k: v for k, v in base["features"].items() if v.get("kind") != "sequence" or k in columns}
        features.update({c: {"kind": "sequence"} for c in columns if c not in features})
        return config_mod.from_dict({
            **base, "features": features,
            "sources": {"table": {"format": "parquet", "path": f"{raw}/wide"}},
            "prepare": {**base["prepare"], "main": "table", "union": [], "output": f"{bench.work}/{name}",
                        "overwrite": True}})

    variants = {"wide": config([*sensors, *extra], "wide-dataset"), "narrow": config(sensors, "narrow-dataset")}

    def variant(cfg: Config) -> Callable[[], Sample]:
        values = counts["rows"] * len(cfg.features.sequences)
        return lambda: {"us_per_value": 1e6 * timed(lambda: prepare.run(spark, cfg, overwrite=True,
                                                                         log=lambda _: None)) / values}

    out = bench.repeat("wide tables", {name: variant(cfg) for name, cfg in variants.items()})
    bench.run.sizes[f"wide sensor table ({WIDE_SENSORS} vs {len(sensors)} sensors)"] = (
        f"{counts['rows']:,} rows ({s.fleet_assets * s.scale} assets x {s.fleet_steps:,} steps)")
    bench.run.results.append(Result(
        "P17", f"sensor windows: prepare's time per sensor value, one table of {WIDE_SENSORS} sensors vs the same "
               f"rows with {len(sensors)} (Parquet, every asset in it)",
        Figure(f"{WIDE_SENSORS} sensors", "µs per value", out["wide"]["us_per_value"]),
        Figure(f"{len(sensors)} sensors", "µs per value", out["narrow"]["us_per_value"]), 1.5, "<="))
