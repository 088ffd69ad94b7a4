"""The prepare job (driver side): raw tables -> train/eval TFRecords + `_meta/`.

Order of work, chosen so that nothing is computed twice and nothing is written half:
  1. read and check every source (schema only, no Spark job yet);
  2. join lookups, aggregate and join activity, mark split and reject reason; persist;
  3. one aggregation pass: counts per split, rejects, missing values, train statistics;
  4. one vocabulary pass over the imputed train rows;
  5. write rejects and records into a staging directory beside the output;
  6. write `_meta/` (manifest last) and move the staging directory into place.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import time
import uuid
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs import __version__
from tfos_jobs.config import Config
from tfos_jobs.data import columns, sources, tfrecord, transforms
from tfos_jobs.data import split as split_mod
from tfos_jobs.storage import HadoopFS
from tfos_jobs.data.meta import MANIFEST, META, SPEC, STATS, VOCAB
from tfos_jobs.errors import InputError, OutputExistsError
from tfos_jobs.features import stats as stats_mod
from tfos_jobs.features import vocab as vocab_mod
from tfos_jobs.features.spec import FeatureSpec, NumericFeature

TIMESTAMP_TYPES = ("timestamp", "timestamp_ntz", "date")


def run(spark: SparkSession, config: Config, *, overwrite: bool = False, log=print) -> dict[str, Any]:
    """Run the whole job; returns the manifest it wrote."""
    started = time.time()
    prep, spec = config.prepare, config.features
    out = prep.output.rstrip("/")
    fs = HadoopFS(spark)
    out = fs.qualify(out)
    if fs.exists(out) and not (overwrite or prep.overwrite):
        raise OutputExistsError(f"output directory {out!r} exists; pass --overwrite to replace it")
    if spec.is_sequence:
        from tfos_jobs.driver import prepare_windows

        return prepare_windows.run(spark, config, fs, out, started, log)

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
        accepted = table.where(F.col(columns.REJECT).isNull())
        imputed = transforms.impute(accepted, resolved, _numeric_defaults(resolved))
        train = imputed.where(F.col(columns.SPLIT) == "train")
        vocab = vocab_mod.compute(train, resolved.categorical)
        classes = _label_classes(resolved, imputed)
        if classes:
            resolved = resolved.with_feature(dataclasses.replace(resolved.label, classes=classes))

        staging = f"{out}.staging-{uuid.uuid4().hex[:8]}"
        try:
            split_files = _write_records(fs, staging, table, imputed, resolved, classes, profile, prep, key)
            spark_info = {"master": spark.sparkContext.master, "version": spark.version}
            manifest = _manifest(config, resolved, out, profile, source_rows, split_files, vocab, spark_info, started,
                                 split_entry)
            write_meta(fs, staging, resolved, profile["stats"], vocab, manifest)
            publish(fs, staging, out)
        except BaseException:
            fs.delete(staging)  # a failed job leaves nothing that could pass for a dataset
            raise
        log(f"prepared {out} in {manifest['seconds']:.1f} s")
        return manifest
    finally:
        rows.unpersist()


def assemble(spark: SparkSession, config: Config, *, for_prediction: bool = False
             ) -> tuple[DataFrame, dict[str, dict[str, Any]]]:
    """Read, check and join the sources into one lazy table holding every stored feature.

    For prediction only the model's inputs are required, and every column is kept."""
    prep, spec = config.prepare, config.features
    main_src = config.sources[prep.main]
    table = sources.read(spark, prep.main, main_src)
    source_rows: dict[str, dict[str, Any]] = {prep.main: {"location": main_src.location()}}
    provided = {c: prep.main for c in table.columns}
    for lk in prep.lookups:
        src = config.sources[lk.source]
        lookup = sources.read(spark, lk.source, src)
        sources.require_columns(lk.source, src, lookup, {lk.right_on: ()})
        sources.require_columns(prep.main, main_src, table, {lk.left_on: ()})
        dupes = transforms.duplicate_keys(lookup, lk.right_on)
        if dupes:
            raise InputError(
                f"source {lk.source!r} ({src.location()}) has more than one row for {lk.right_on} = "
                f"{dupes!r}; a lookup needs one row per key"
            )
        table = transforms.join_lookup(table, lookup, lk.left_on, lk.right_on, lk.source)
        provided.update({c: lk.source for c in lookup.columns if c != lk.right_on})
        source_rows[lk.source] = {"location": src.location(), "rows": lookup.count()}
    if prep.activity is not None:
        act = prep.activity
        src = config.sources[act.source]
        events = sources.read(spark, act.source, src)
        sources.require_columns(act.source, src, events, {
            act.key: (), act.timestamp: TIMESTAMP_TYPES, act.event_column: ("string",),
        })
        as_of = _as_of(events, act)
        usable, cond = transforms.activity_window(events, act, as_of)
        counts = events.agg(F.count(F.lit(1)).alias("rows"), F.sum(F.when(cond, 0).otherwise(1)).alias("excluded")).first()
        source_rows[act.source] = {
            "location": src.location(), "rows": counts["rows"], "excluded": int(counts["excluded"] or 0),
            "excluded_reason": f"null key or timestamp, or on/after as_of {as_of.isoformat()}",
            "as_of": as_of.isoformat(),
        }
        table = transforms.join_activity(table, transforms.aggregate_activity(usable, act, as_of), spec.key.name, act.key)
        provided.update({c: act.source for c in columns.ACTIVITY_COLUMNS})

    errors = spec.input_type_errors(sources.column_types(table), spec.model_inputs if for_prediction else None)
    if errors:
        searched = ", ".join(dict.fromkeys(provided.values()))
        lines = [f"{msg} in source {provided[col]!r}" if col in provided else f"{msg} from every source ({searched})"
                 for col, msg in errors]
        raise InputError("input does not match the feature spec:\n  " + "\n  ".join(lines))
    if for_prediction:
        return table, source_rows
    keep = list(spec.stored_columns)
    if prep.split.mode == "column":
        keep.append(prep.split.column)
    if columns.CORRUPT in table.columns:
        keep += [columns.CORRUPT, columns.SOURCE_FILE]
    return table.select(*dict.fromkeys(keep)), source_rows


def _write_records(fs: HadoopFS, staging: str, table: DataFrame, imputed: DataFrame, spec: FeatureSpec,
                   classes: tuple[str, ...], profile: dict[str, Any], prep, key: str | None
                   ) -> dict[str, list[tuple[str, int]]]:
    """Rejects and records into the staging directory; returns the files of each split."""
    if profile["rejected"]:
        # `_raw_record`: JSON readers treat a column named _corrupt_record as their own
        rejects = table.where(F.col(columns.REJECT).isNotNull()).withColumnRenamed(columns.CORRUPT, "_raw_record")
        rejects.write.json(f"{staging}/_rejects")
    records = imputed.select(*transforms.record_columns(spec, classes), columns.SPLIT)
    tfrecord.write_partitioned(
        records, f"{staging}/_records", columns.SPLIT, files=prep.files_per_split, key=key,
        fmt=prep.tfrecord_format, compression=prep.compression,
    )
    return settle_splits(fs, staging)


def publish(fs: HadoopFS, staging: str, out: str) -> None:
    """Mark the staging directory complete and move it into place (replacing `out`)."""
    fs.write_text(f"{staging}/_SUCCESS", "")
    if fs.exists(out):
        fs.delete(out)
    fs.rename(staging, out)


def settle_splits(fs: HadoopFS, staging: str) -> dict[str, list[tuple[str, int]]]:
    """`_records/split=<s>/part-*` -> `<s>/part-NNNNN.*` (an empty split gets an empty
    directory); returns each split's (file, bytes)."""
    split_files = {}
    for split in ("train", "eval"):
        src, dst = f"{staging}/_records/{columns.SPLIT}={split}", f"{staging}/{split}"
        if fs.exists(src):
            fs.rename(src, dst)
        else:
            fs.mkdirs(dst)
        for name, _ in fs.list_files(dst):
            fs.rename(f"{dst}/{name}", f"{dst}/{stable_name(name)}")
        split_files[split] = fs.list_files(dst)
    fs.delete(f"{staging}/_records")
    return split_files


def stable_name(name: str) -> str:
    """`part-00003-<job uuid>.c000.tfrecord` -> `part-00003.tfrecord`: the same input gives the
    same file names (and, rows being spread by key and sorted, the same bytes) on every run."""
    match = re.fullmatch(r"(part-\d+)-[^.]*(?:\.c\d+)?(\..+)", name)
    return f"{match.group(1)}{match.group(2)}" if match else name


def _as_of(events: DataFrame, act) -> dt.date:
    if act.as_of:
        return dt.date.fromisoformat(act.as_of)
    last = events.agg(F.max(F.to_date(act.timestamp))).first()[0]
    return (last or dt.date.today()) + dt.timedelta(days=1)


def _profile(table: DataFrame, spec: FeatureSpec) -> dict[str, Any]:
    """Everything the manifest and the defaults need, in one aggregation job."""
    ok = F.col(columns.REJECT).isNull()
    train = ok & (F.col(columns.SPLIT) == "train")
    imputable = [f.name for f in spec.features if f.kind in ("numeric", "categorical")]
    numeric = [f.name for f in spec.numeric]
    truncating = {f.name: f.max_length for f in spec.categorical if f.max_length is not None}
    row = table.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(~ok, 1).otherwise(0)).alias("rejected"),
        (F.sum(F.when(F.col(columns.CORRUPT).isNotNull(), 1).otherwise(0)) if columns.CORRUPT in table.columns
         else F.lit(0)).alias("malformed"),
        F.sum(F.when(train, 1).otherwise(0)).alias("train"),
        F.sum(F.when(ok & (F.col(columns.SPLIT) == "eval"), 1).otherwise(0)).alias("eval"),
        F.sum(F.when(ok & stats_mod.any_missing(imputable, numeric), 1).otherwise(0)).alias("rows_imputed"),
        *stats_mod.missing_aggs(imputable, numeric, ok),
        *[F.sum(F.when(ok & (F.length(F.col(name)) > limit), 1).otherwise(0)).alias(f"{name}__truncated")
          for name, limit in truncating.items()],
        *stats_mod.numeric_aggs(numeric, train),
    ).first()
    rejected_by_reason = {}
    if row["rejected"]:
        reasons = table.where(~ok).groupBy(columns.REJECT).count().orderBy(F.desc("count")).collect()
        rejected_by_reason = {r[columns.REJECT]: r["count"] for r in reasons}
    return {
        "rows": row["rows"],
        "rejected": int(row["rejected"] or 0),
        "malformed": int(row["malformed"] or 0),
        "rejected_by_reason": rejected_by_reason,
        "split_rows": {"train": int(row["train"] or 0), "eval": int(row["eval"] or 0)},
        "rows_imputed": int(row["rows_imputed"] or 0),
        "missing": {c: int(row[f"{c}__missing"] or 0) for c in imputable},
        "truncated": {c: int(row[f"{c}__truncated"] or 0) for c in truncating},
        "stats": stats_mod.numeric_from_row(row, numeric),
    }


def _first_malformed(spark: SparkSession, table: DataFrame) -> str:
    """Where the first malformed row is: file and line, for `prepare.bad_rows = "strict"`."""
    row = table.where(F.col(columns.CORRUPT).isNotNull()) \
        .select(columns.CORRUPT, columns.SOURCE_FILE).orderBy(columns.SOURCE_FILE).first()
    record, path = row[columns.CORRUPT], row[columns.SOURCE_FILE]
    where = path
    fs = HadoopFS(spark)
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


def _numeric_defaults(spec: FeatureSpec) -> dict[str, float]:
    return {f.name: float(f.default) for f in spec.features if isinstance(f, NumericFeature)}


def _label_classes(spec: FeatureSpec, imputed: DataFrame) -> tuple[str, ...]:
    """Multiclass labels: the configured classes, else every class seen, by count then value."""
    label = spec.label
    if label.task != "multiclass":
        return ()
    if label.classes:
        return label.classes
    counts = imputed.groupBy(F.col(label.name).cast("string").alias("c")).count().collect()
    return tuple(r["c"] for r in sorted(counts, key=lambda r: (-r["count"], r["c"])))


def manifest_header(config: Config, spec: FeatureSpec, out: str, spark_info: dict[str, str], started: float,
                    record_type: str) -> dict[str, Any]:
    """What every dataset's manifest starts with: versions, time, where, the spec, the records."""
    prep = config.prepare
    return {
        "format_version": 1,
        "tfos_version": __version__,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.time() - started, 1),
        "output": out,
        "spark": spark_info,
        "spec_fingerprint": spec.fingerprint(),
        "records": {"format": prep.tfrecord_format, "record_type": record_type, "compression": prep.compression,
                    "columns": spec.record_schema()},
    }


def _manifest(config: Config, spec: FeatureSpec, out: str, profile: dict[str, Any],
              source_rows: dict[str, Any], split_files: dict[str, list[tuple[str, int]]],
              vocab: dict[str, list], spark_info: dict[str, str], started: float,
              split_entry: dict[str, Any]) -> dict[str, Any]:
    return {
        **manifest_header(config, spec, out, spark_info, started, "Example"),
        "splits": {
            split: {
                "records": profile["split_rows"][split],
                "files": [{"path": name, "bytes": size} for name, size in files],
            }
            for split, files in split_files.items()
        },
        "split": split_entry,
        "sources": source_rows,
        "rejected": {"rows": profile["rejected"], "by_reason": profile["rejected_by_reason"],
                     "path": "_rejects" if profile["rejected"] else None},
        "imputed": {"rows": profile["rows_imputed"], "by_column": profile["missing"]},
        "truncated": profile["truncated"],
        "vocabulary_sizes": {name: len(entries) for name, entries in vocab.items()},
    }


def write_meta(fs: HadoopFS, root: str, spec: FeatureSpec, stats: dict[str, Any],
                vocab: dict[str, list[tuple[str, int]]], manifest: dict[str, Any]) -> None:
    meta = f"{root}/{META}"
    fs.write_text(f"{meta}/{SPEC}", spec.to_json())
    fs.write_text(f"{meta}/{STATS}", json.dumps(stats, indent=2, sort_keys=True) + "\n")
    for name, entries in vocab.items():
        fs.write_text(f"{meta}/{VOCAB}/{name}.txt", "".join(f"{value}\n" for value, _ in entries))
    fs.write_text(f"{meta}/{MANIFEST}", json.dumps(manifest, indent=2) + "\n")
