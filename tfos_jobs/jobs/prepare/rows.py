"""The prepare job for rows (driver side): raw tables -> train/eval/test tf.Examples + `_meta/`.

Order of work, chosen so that nothing is computed twice and nothing is written half:
  1. read and check every source (schema only, no Spark job yet);
  2. join lookups and aggregates (activity's too), mark split and reject reason; persist;
  3. one aggregation pass: counts per split, rejects, missing values, train statistics;
  4. one vocabulary pass over the imputed train rows;
  5. write rejects and records into a staging directory beside the output;
  6. write `_meta/` (manifest last) and move the staging directory into place.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import uuid
from typing import Any, Callable, Iterator, Mapping

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config, SourceConfig
from tfos_jobs.contracts.dataset import (ALL_SPLITS, EXAMPLE, RECORDS, REJECTS, STATS_BINS, Manifest, Split,
                                         SplitFiles)
from tfos_jobs.data import columns, dataset, tfrecord, transforms
from tfos_jobs.data import split as split_mod
from tfos_jobs.data.assemble import assemble
from tfos_jobs.errors import InputError
from tfos_jobs.features import stats as stats_mod
from tfos_jobs.features import vocab as vocab_mod
from tfos_jobs.features.spec import FeatureSpec, ListFeature, NumericEncoding, NumericFeature
from tfos_jobs.storage import Storage, staging_beside
from tfos_jobs.tasks import Task
from tfos_jobs import sessions


def run(spark: SparkSession, config: Config, fs: Storage, out: str, started: float,
        log: Callable[[str], None]) -> Manifest:
    """Called by `jobs.prepare.run` once the output is known to be free (or to be replaced)."""
    prep, spec = config.prepare, config.features
    table, source_rows = assemble(spark, config)
    key = spec.key.name if spec.key else None
    rows = table.withColumn(columns.REJECT, transforms.reject_reason(spec, prep.split, table.columns)) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    try:
        table = rows.withColumn(columns.SPLIT, split_mod.assign(prep.split, key))
        profile = _profile(table, spec)
        main_name = prep.main
        source_rows[main_name] = {**source_rows.get(main_name, {}), "rows": profile["rows"]}
        if profile["rows"] == 0:
            raise InputError(f"source {main_name!r} ({config.sources[main_name].location()}) has no rows")
        if profile["rows"] == profile["rejected"]:
            raise InputError(f"no usable rows: all {profile['rows']:,} rows were rejected ({profile['rejected_by_reason']})")
        usable = rows.where(F.col(columns.REJECT).isNull())
        eval_below, moved = split_mod.settle(usable, prep.split, key, profile["split_rows"])
        if moved:
            log(f"split: {moved}")
            table = rows.withColumn(columns.SPLIT, split_mod.assign(prep.split, key, eval_below))
            profile = _profile(table, spec)
        split_entry = split_mod.describe(prep.split, eval_below, moved)
        if prep.bad_rows == "strict" and profile["malformed"]:
            raise InputError(_first_malformed(spark, table))
        resolved = _resolve_defaults(spec, profile["stats"])
        train_rows = table.where(F.col(columns.REJECT).isNull() & (F.col(columns.SPLIT) == Split.TRAIN))
        for name, edges in _bins(train_rows, spec).items():
            profile["stats"][name][STATS_BINS] = edges
        accepted = table.where(F.col(columns.REJECT).isNull())
        imputed = transforms.impute(accepted, resolved, _numeric_defaults(resolved))
        train = imputed.where(F.col(columns.SPLIT) == Split.TRAIN)
        vocab = vocab_mod.compute(train, resolved.with_vocabulary)
        classes = _label_classes(resolved, imputed)
        if classes:
            resolved = resolved.with_feature(dataclasses.replace(resolved.label, classes=classes))

        staging = staging_beside(out)
        try:
            split_files = _write_records(fs, staging, table, imputed, resolved, classes, profile, prep, key)
            spark_info = {"master": sessions.master(spark), "version": spark.version}
            manifest = _manifest(config, resolved, out, profile, source_rows, split_files, vocab, spark_info, started,
                                 split_entry)
            dataset.write_meta(fs, staging, resolved, profile["stats"], vocab, manifest)
            dataset.publish(fs, staging, out)
        except BaseException:
            fs.delete(staging)  # a failed job leaves nothing that could pass for a dataset
            raise
        log(f"prepared {out} in {manifest.seconds:.1f} s")
        return manifest
    finally:
        rows.unpersist()


@contextlib.contextmanager
def dataframe_sources(spark: SparkSession, config: Config, tables: Mapping[str, DataFrame]) -> Iterator[Config]:
    """`config` with each of `tables` (DataFrames the caller holds) as the source of that name,
    for as long as the block runs: each is a session-scoped view that is dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    views = {name: f"tfos_dataframe_{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{tag}" for name in tables}
    for name, df in tables.items():
        if not isinstance(df, DataFrame):
            raise InputError(f"tables[{name!r}]: expected a pyspark DataFrame, got {type(df).__name__}")
        df.createOrReplaceTempView(views[name])
    try:
        sources = {**config.sources, **{name: SourceConfig(format="table", table=view) for name, view in views.items()}}
        yield dataclasses.replace(config, sources=sources)
    finally:
        for view in views.values():
            spark.catalog.dropTempView(view)


def _write_records(fs: Storage, staging: str, table: DataFrame, imputed: DataFrame, spec: FeatureSpec,
                   classes: tuple[str, ...], profile: dict[str, Any], prep, key: str | None
                   ) -> dict[str, list[tuple[str, int]]]:
    """Rejects and records into the staging directory; returns the files of each split."""
    if profile["rejected"]:
        # `_raw_record`: JSON readers treat a column named _corrupt_record as their own
        rejects = table.where(F.col(columns.REJECT).isNotNull()).withColumnRenamed(columns.CORRUPT, "_raw_record")
        rejects.write.json(f"{staging}/{REJECTS}")
    records = imputed.select(*transforms.record_columns(spec, classes), columns.SPLIT)
    tfrecord.write_partitioned(
        records, f"{staging}/{RECORDS}", columns.SPLIT, files=prep.files_per_split, key=key,
        fmt=prep.tfrecord_format, compression=prep.compression,
    )
    return dataset.settle(fs, staging)


def _profile(table: DataFrame, spec: FeatureSpec) -> dict[str, Any]:
    """Everything the manifest and the defaults need, in one aggregation job."""
    ok = F.col(columns.REJECT).isNull()
    train = ok & (F.col(columns.SPLIT) == Split.TRAIN)
    imputable = [f.name for f in spec.features if f.kind in ("numeric", "categorical", "text", "list", "vector")]
    numeric = [f.name for f in spec.numeric]
    truncating = stats_mod.truncated_aggs(spec.features, ok)
    lists = [f for f in spec.bags if isinstance(f, ListFeature)]
    row = table.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(~ok, 1).otherwise(0)).alias("rejected"),
        (F.sum(F.when(F.col(columns.CORRUPT).isNotNull(), 1).otherwise(0)) if columns.CORRUPT in table.columns
         else F.lit(0)).alias("malformed"),
        *[F.sum(F.when(ok & (F.col(columns.SPLIT) == split), 1).otherwise(0)).alias(split) for split in ALL_SPLITS],
        F.sum(F.when(ok & stats_mod.any_missing(imputable, numeric), 1).otherwise(0)).alias("rows_imputed"),
        *stats_mod.missing_aggs(imputable, numeric, ok),
        *truncating.values(),
        *stats_mod.dropped_aggs(lists, ok),
        *stats_mod.numeric_aggs(numeric, train),
    ).first()
    assert row is not None  # an aggregation without grouping has one row
    rejected_by_reason = {}
    if row["rejected"]:
        reasons = table.where(~ok).groupBy(columns.REJECT).count().orderBy(F.desc("count")).collect()
        rejected_by_reason = {r[columns.REJECT]: r["count"] for r in reasons}
    return {
        "rows": row["rows"],
        "rejected": int(row["rejected"] or 0),
        "malformed": int(row["malformed"] or 0),
        "rejected_by_reason": rejected_by_reason,
        "split_rows": {split: int(row[split] or 0) for split in ALL_SPLITS},
        "rows_imputed": int(row["rows_imputed"] or 0),
        "missing": {c: int(row[f"{c}__missing"] or 0) for c in imputable},
        "truncated": {c: int(row[f"{c}__truncated"] or 0) for c in truncating},
        "dropped_elements": {f.name: int(row[f"{f.name}__dropped"] or 0) for f in lists},
        "stats": stats_mod.numeric_from_row(row, numeric),
    }


def _first_malformed(spark: SparkSession, table: DataFrame) -> str:
    """Where the first malformed row is: file and line, for `prepare.bad_rows = "strict"`."""
    row = table.where(F.col(columns.CORRUPT).isNotNull()) \
        .select(columns.CORRUPT, columns.SOURCE_FILE).orderBy(columns.SOURCE_FILE).first()
    assert row is not None  # called when the profile counted malformed rows
    record, path = row[columns.CORRUPT], row[columns.SOURCE_FILE]
    where = path
    fs = Storage.as_spark_sees(spark)
    for number, line in enumerate(fs.read_text(path).splitlines(), start=1):
        if line == record.rstrip("\r\n"):
            where = f"{path}, line {number}"
            break
    return (f"malformed input row in {where}: {record.strip()[:200]!r} "
            "(prepare.bad_rows = \"strict\"; use \"quarantine\" to set such rows aside in _rejects/ instead)")


def _resolve_defaults(spec: FeatureSpec, stats: dict[str, dict[str, Any]]) -> FeatureSpec:
    """Replace `default = "mean"` with the train mean, so the spec alone says how to fill a gap."""
    for f in spec.numeric:
        if f.default == "mean":
            mean = stats[f.name]["mean"]
            if mean is None:
                raise InputError(f"column {f.name!r}: every train value is missing, so default = \"mean\" has no value")
            spec = spec.with_feature(dataclasses.replace(f, default=float(mean)))
    return spec


def _bins(train: DataFrame, spec: FeatureSpec) -> dict[str, list[float]]:
    try:
        return stats_mod.quantile_bins(train, {f.name: f.bins for f in spec.numeric
                                                   if f.encoding == NumericEncoding.PIECEWISE_LINEAR})
    except ValueError as e:
        raise InputError(str(e)) from None


def _numeric_defaults(spec: FeatureSpec) -> dict[str, float]:
    return {f.name: float(f.default) for f in spec.features if isinstance(f, NumericFeature)}


def _label_classes(spec: FeatureSpec, imputed: DataFrame) -> tuple[str, ...]:
    """Multiclass labels: the configured classes, else every class seen, by count then value."""
    label = spec.label
    if label.task != Task.MULTICLASS:
        return ()
    if label.classes:
        return label.classes
    counts = imputed.groupBy(F.col(label.name).cast("string").alias("c")).count().collect()
    return tuple(r["c"] for r in sorted(counts, key=lambda r: (-r["count"], r["c"])))


def _manifest(config: Config, spec: FeatureSpec, out: str, profile: dict[str, Any],
              source_rows: dict[str, Any], split_files: dict[str, list[tuple[str, int]]],
              vocab: dict[str, list], spark_info: dict[str, str], started: float,
              split_entry: dict[str, Any]) -> Manifest:
    prep = config.prepare
    return Manifest(
        **dataset.header(spec, out, spark_info, started, EXAMPLE, prep.tfrecord_format, prep.compression),
        splits={split: SplitFiles(profile["split_rows"][split], tuple(files)) for split, files in split_files.items()},
        split=split_entry,
        sources=source_rows,
        rejected={"rows": profile["rejected"], "by_reason": profile["rejected_by_reason"],
                  "path": REJECTS if profile["rejected"] else None},
        imputed={"rows": profile["rows_imputed"], "by_column": profile["missing"]},
        truncated=profile["truncated"],
        dropped_elements=profile["dropped_elements"] or None,
        vocabulary_sizes={name: len(entries) for name, entries in vocab.items()},
    )
