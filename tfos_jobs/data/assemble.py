"""The prepare job's input: the main source joined with its lookups, its activity and the aggregates users write.

One lazy table holding every stored feature, checked against the spec before any Spark job runs. Prepare writes it;
`tfos predict` and `tfos sql` score it, so serving is fed exactly as training was."""
from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config, LookupConfig
from tfos_jobs.data import aggregates, columns, sources, transforms
from tfos_jobs.errors import InputError

TIMESTAMP_TYPES = ("timestamp", "timestamp_ntz", "date")


def assemble(spark: SparkSession, config: Config, *, for_prediction: bool = False, main: DataFrame | None = None
             ) -> tuple[DataFrame, dict[str, dict[str, Any]]]:
    """Read, check and join the sources into one lazy table holding every stored feature.

    For prediction only the model's inputs are required, and every column is kept. `main` stands for the main source's
    rows (a stream of them): no action runs on it, and the static sides it is joined with (lookups, the
    aggregates) are computed once and cached, not again for every micro-batch."""
    prep, spec = config.prepare, config.features
    main_src = config.sources[prep.main]
    table = sources.read(spark, prep.main, main_src) if main is None else main
    source_rows: dict[str, dict[str, Any]] = {prep.main: {"location": main_src.location()}}
    provided = {c: prep.main for c in table.columns}
    lookups = [(lk, _lookup(spark, config, lk, table)) for lk in prep.lookups]
    for lk, lookup in lookups:
        provided.update({c: lk.source for c in lookup.columns if c != lk.right_on})
    events = _events(spark, config) if prep.activity is not None else None
    if prep.activity is not None:
        provided.update({c: prep.activity.source for c in columns.ACTIVITY_COLUMNS})
    written = aggregates.analysed(spark, config, provided)  # every expression checked before the first job
    for lk, lookup in lookups:
        src = config.sources[lk.source]
        dupes = transforms.duplicate_keys(lookup, lk.right_on)
        if dupes:
            raise InputError(
                f"source {lk.source!r} ({src.location()}) has more than one row for {lk.right_on} = "
                f"{dupes!r}; a lookup needs one row per key"
            )
        if main is not None:
            lookup = lookup.cache()
        table = transforms.join_lookup(table, lookup, lk.left_on, lk.right_on, lk.source)
        source_rows[lk.source] = {"location": src.location(), "rows": lookup.count()}
    for agg in ([_activity(config, events, source_rows)] if events is not None else []) + written:
        key = spec.key
        assert key is not None  # aggregates join on it (PrepareConfig.errors)
        rows = agg.rows if main is None else aggregates.for_stream(spark, agg.rows, agg.config.key)
        table = aggregates.join(table, rows, key.name, agg.config.key, agg.zeros)
        provided.update({c: agg.config.source for c in agg.config.columns})
        if agg.config.source not in source_rows:  # the activity's counts, when it reads the same source
            source_rows[agg.config.source] = {"location": config.sources[agg.config.source].location(), **agg.counts()}

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
        assert prep.split.column is not None  # mode = "column" names one (SplitConfig.errors)
        keep.append(prep.split.column)
    if columns.CORRUPT in table.columns:
        keep += [columns.CORRUPT, columns.SOURCE_FILE]
    return transforms.vectors_as_arrays(table.select(*dict.fromkeys(keep)), spec), source_rows


def _lookup(spark: SparkSession, config: Config, lk: LookupConfig, table: DataFrame) -> DataFrame:
    """A lookup source read, its key and the main table's checked (no Spark job)."""
    src, main_src = config.sources[lk.source], config.sources[config.prepare.main]
    lookup = sources.read(spark, lk.source, src)
    sources.require_columns(lk.source, src, lookup, {lk.right_on: ()})
    sources.require_columns(config.prepare.main, main_src, table, {lk.left_on: ()})
    return lookup


def _events(spark: SparkSession, config: Config) -> DataFrame:
    """The activity source read, its columns checked (no Spark job)."""
    act = config.prepare.activity
    assert act is not None  # called for a config with activity
    src = config.sources[act.source]
    events = sources.read(spark, act.source, src)
    sources.require_columns(act.source, src, events, {
        act.key: (), act.timestamp: TIMESTAMP_TYPES, act.event_column: ("string",),
    })
    return events


def _activity(config: Config, events: DataFrame, source_rows: dict[str, dict[str, Any]]) -> aggregates.Aggregated:
    """`[prepare.activity]` as an aggregate; the events it leaves out are counted in the source's entry."""
    act = config.prepare.activity
    assert act is not None  # called for a config with activity
    as_of = _as_of(events, act)
    agg = aggregates.activity(act, as_of)
    assert agg.where is not None  # the activity's window
    activity = aggregates.Aggregated("prepare.activity", agg, aggregates.grouped(events.where(agg.where), agg,
                                     "prepare.activity"), events, zeros=(columns.EVENT_COUNT, columns.ACTIVE_DAYS))
    source_rows[act.source] = {
        "location": config.sources[act.source].location(), **activity.counts(),
        "excluded_reason": f"null key or timestamp, or on/after as_of {as_of.isoformat()}", "as_of": as_of.isoformat(),
    }
    return activity


def _as_of(events: DataFrame, act) -> dt.date:
    if act.as_of:
        return dt.date.fromisoformat(act.as_of)
    row = events.agg(F.max(F.to_date(act.timestamp))).first()
    assert row is not None  # an aggregate without groups has one row
    last = row[0]
    return (last or dt.date.today()) + dt.timedelta(days=1)
