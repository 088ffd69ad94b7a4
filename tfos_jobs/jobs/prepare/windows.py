"""The prepare job for sensor windows (driver side): sensor rows -> window SequenceExamples.

  1. check every file and read the sources (sensor_sources); rows that did not parse are
     set aside;
  2. cut every asset's series into windows on the executors (data.windows); persist; mark
     each window's split by a hash of its asset (no asset in both splits) or by time (no
     window spans two splits; those that would are dropped), so that neither split is empty
     (data.split);
  3. one aggregation: windows per split, dropped windows by reason, input problems, and the
     train split's per-sensor statistics;
  4. write rejects and records (one feature list per sensor, context: asset and window
     bounds) into a staging directory, then `_meta/` (manifest last), and move it into place.
Nothing is collected to the driver but counts.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config, SplitConfig
from tfos_jobs.contracts.dataset import ALL_SPLITS, RECORDS, REJECTS, SEQUENCE_EXAMPLE, Manifest, Split, SplitFiles
from tfos_jobs.data import columns, dataset, sensor_sources, tfrecord, windows
from tfos_jobs.data import split as split_mod
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START, FeatureSpec
from tfos_jobs.features.standardisation import STATS_PER_ASSET
from tfos_jobs.features.stats import stable
from tfos_jobs.storage import Storage, staging_beside
from tfos_jobs import sessions

DROPPED = (*windows.DROP_REASONS, split_mod.BOUNDARY)  # why a cut window is not written


def run(spark: SparkSession, config: Config, fs: Storage, out: str, started: float,
        log: Callable[[str], None]) -> Manifest:
    """Called by `jobs.prepare.run` once the output is known to be free (or to be replaced)."""
    prep, spec = config.prepare, config.features

    rows, source_info = sensor_sources.read_rows(spark, config, spec)
    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        good = rows.where(F.col(columns.CORRUPT).isNull())
        assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
        key = spec.key.name
        all_cut = windows.all_windows(good, spec).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            cut = _with_split(all_cut, prep.split, key)
            profile = _profile(rows, cut, spec)
            if profile["problem"]:
                raise InputError(profile["problem"])
            if profile["rows"] == profile["rejected"]:
                raise InputError(f"no usable rows: all {profile['rows']:,} rows of {prep.main!r} were rejected "
                                 "(see the first ones above; times and sensor values must parse)")
            if not sum(profile["windows"].values()):
                raise InputError(f"no usable window ({sum(profile['dropped'].values()):,} dropped: "
                                 + ", ".join(f"{n:,} {r}" for r, n in profile["dropped"].items())
                                 + f"); windows need {spec.time.window} steps of {spec.time.step_seconds} s")
            eval_below, moved = split_mod.settle(windows.usable(all_cut), prep.split, key, profile["assets"])
            if moved:
                log(f"split: {moved}")
                cut = _with_split(all_cut, prep.split, key, eval_below)
                profile = _profile(rows, cut, spec)
            staging = staging_beside(out)
            try:
                if profile["rejected"]:
                    rows.where(F.col(columns.CORRUPT).isNotNull()) \
                        .withColumnRenamed(columns.CORRUPT, "_raw_record").write.json(f"{staging}/{REJECTS}")
                records = windows.usable(cut).select(
                    spec.key.name, WINDOW_START, WINDOW_END,
                    *[F.transform(f.name, lambda v: F.array(v)).alias(f.name) for f in spec.sequences],
                    columns.SPLIT)
                tfrecord.write_partitioned(records, f"{staging}/{RECORDS}", columns.SPLIT, files=prep.files_per_split,
                                           key=spec.key.name, then=(WINDOW_START,), fmt=prep.tfrecord_format,
                                           compression=prep.compression, record_type=SEQUENCE_EXAMPLE)
                split_files = dataset.settle(fs, staging)
                spark_info = {"master": sessions.master(spark), "version": spark.version}
                manifest = _manifest(config, spec, out, profile, source_info, split_files, spark_info, started,
                                     split_mod.describe(prep.split, eval_below, moved))
                dataset.write_meta(fs, staging, spec, profile["stats"], {}, manifest)
                dataset.publish(fs, staging, out)
            except BaseException:
                fs.delete(staging)
                raise
        finally:
            all_cut.unpersist()
    finally:
        rows.unpersist()
    log(f"prepared {out} in {manifest.seconds:.1f} s")
    return manifest


def _with_split(windows: DataFrame, split: SplitConfig, key: str, eval_below: int | None = None) -> DataFrame:
    """Each window's split; a usable window in none (it spans a time split's instant) is dropped, with its reason."""
    chosen = windows.withColumn(columns.SPLIT, split_mod.assign(split, key, eval_below))
    spans = F.col(columns.SPLIT).isNull() & F.col(columns.DROP_REASON).isNull() & F.col(columns.PROBLEM).isNull()
    return chosen.withColumn(columns.DROP_REASON, F.when(spans, F.lit(split_mod.BOUNDARY))
                             .otherwise(F.col(columns.DROP_REASON)))


def _profile(rows: DataFrame, cut: DataFrame, spec: FeatureSpec) -> dict[str, Any]:
    """Rows read and rejected; windows per split and dropped by reason; the first input
    problem; per sensor (and per asset) count, mean, std, min, max over the train windows (`_sensor_stats`)."""
    counts = rows.agg(F.count(F.lit(1)).alias("rows"),
                      F.count(columns.CORRUPT).alias("rejected")).first()
    kept = F.col(columns.DROP_REASON).isNull() & F.col(columns.PROBLEM).isNull()
    train = kept & (F.col(columns.SPLIT) == Split.TRAIN)
    aggs = [F.min(columns.PROBLEM).alias("problem")]
    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    for split in ALL_SPLITS:  # a test split named by a split column is counted and written too
        aggs.append(F.sum(F.when(kept & (F.col(columns.SPLIT) == split), 1).otherwise(0)).alias(f"windows_{split}"))
        aggs.append(F.countDistinct(F.when(kept & (F.col(columns.SPLIT) == split), F.col(spec.key.name)))
                    .alias(f"assets_{split}"))
    for reason in DROPPED:
        aggs.append(F.sum(F.when(F.col(columns.DROP_REASON) == reason, 1).otherwise(0)).alias(f"dropped_{reason}"))
    row = cut.agg(*aggs).first()
    assert counts is not None and row is not None  # an aggregation without grouping has one row
    stats = _sensor_stats(cut.where(train), [f.name for f in spec.sequences], spec.key.name)
    dropped = {r: int(row[f"dropped_{r}"] or 0) for r in DROPPED}
    return {
        "rows": counts["rows"], "rejected": counts["rejected"], "problem": row["problem"],
        "windows": {s: int(row[f"windows_{s}"] or 0) for s in ALL_SPLITS},
        "assets": {s: int(row[f"assets_{s}"] or 0) for s in ALL_SPLITS},
        "dropped": dropped, "stats": stats,
    }


def _sensor_stats(windows: DataFrame, sensors: list[str], key: str) -> dict[str, dict[str, Any]]:
    """Per sensor: count, mean, std, min and max of every value of `windows`; and under the key's
    name, each asset's count, mean and std per sensor (`STATS_PER_ASSET`). Each
    task sums its windows per asset with numpy and sends one row per asset; the plan stays the same
    size whatever the number of sensors (an aggregate of five expressions per sensor grows past
    what Spark compiles)."""
    d = len(sensors)

    def sums(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        acc: dict[str, list[Any]] = {}
        for batch in batches:
            assets = batch.column(0).cast(pa.string()).to_numpy(zero_copy_only=False)
            for asset in np.unique(assets):
                mine = batch.filter(pa.array(assets == asset))
                n, total, squares, low, high = acc.setdefault(str(asset), [
                    np.zeros(d, np.int64), np.zeros(d), np.zeros(d), np.full(d, np.inf), np.full(d, -np.inf)])
                for j in range(d):
                    values = pc.list_flatten(mine.column(j + 1)).to_numpy(zero_copy_only=False).astype(np.float64)
                    if values.size:
                        n[j] += values.size
                        total[j] += values.sum()
                        squares[j] += np.dot(values, values)
                        low[j], high[j] = min(low[j], values.min()), max(high[j], values.max())
        names = sorted(acc)
        yield pa.RecordBatch.from_pydict({"asset": names, **{field: [acc[a][i].tolist() for a in names]
                                                             for i, field in enumerate(_SUMS)}})

    schema = "asset string, " + ", ".join(f"{field} array<{'long' if field == 'n' else 'double'}>" for field in _SUMS)
    parts = windows.select(key, *sensors).mapInArrow(sums, schema).collect()
    by_asset: dict[str, list[Any]] = {}
    for p in parts:
        by_asset.setdefault(p["asset"], []).append(p)
    stats = {name: _moments(parts, j) for j, name in enumerate(sensors)}
    stats[key] = {"count": len(by_asset), STATS_PER_ASSET: {
        asset: {field: [_moments(mine, j)[field] for j in range(d)] for field in ("count", "mean", "std")}
        for asset, mine in sorted(by_asset.items())}}
    return stats


_SUMS = ("n", "total", "squares", "low", "high")  # what a task sends per asset and sensor


def _moments(parts: list[Any], j: int) -> dict[str, Any]:
    """Count, mean, std, min and max of sensor `j` from the tasks' sums."""
    n = sum(int(p["n"][j]) for p in parts)
    mean = sum(p["total"][j] for p in parts) / n if n else None
    var = max(sum(p["squares"][j] for p in parts) / n - mean * mean, 0.0) if mean is not None else None
    low = min((p["low"][j] for p in parts), default=math.inf)
    high = max((p["high"][j] for p in parts), default=-math.inf)
    return {"count": n, "mean": stable(mean), "std": stable(math.sqrt(var) if var is not None else None),
            "min": stable(low if n else None), "max": stable(high if n else None)}


def _manifest(config: Config, spec: FeatureSpec, out: str, profile: dict[str, Any], source_info: dict[str, Any],
              split_files: dict[str, list[tuple[str, int]]], spark_info: dict[str, str],
              started: float, split_entry: dict[str, Any]) -> Manifest:
    prep = config.prepare
    return Manifest(
        **dataset.header(spec, out, spark_info, started, SEQUENCE_EXAMPLE, prep.tfrecord_format, prep.compression),
        splits={split: SplitFiles(profile["windows"][split], tuple(files), profile["assets"][split])
                for split, files in split_files.items()},
        split=split_entry,
        sources=source_info,
        rows={"read": profile["rows"], "rejected": profile["rejected"]},
        windows={"kept": sum(profile["windows"].values()), "dropped": sum(profile["dropped"].values()),
                 "dropped_by_reason": profile["dropped"], "window": spec.time.window, "stride": spec.time.stride},
        rejected={"rows": profile["rejected"], "by_reason": {"malformed row": profile["rejected"]}
                  if profile["rejected"] else {}, "path": REJECTS if profile["rejected"] else None},
    )
