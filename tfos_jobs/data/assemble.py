"""The prepare job's input: the main source joined with its lookups and activity aggregates.

One lazy table holding every stored feature, checked against the spec before any Spark job runs. Prepare writes it;
`tfos predict` and `tfos sql` score it, so serving is fed exactly as training was."""
from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs import sessions
from tfos_jobs.config import Config
from tfos_jobs.data import columns, sources, transforms
from tfos_jobs.errors import InputError

TIMESTAMP_TYPES = ("timestamp", "timestamp_ntz", "date")


def assemble(spark: SparkSession, config: Config, *, for_prediction: bool = False, main: DataFrame | None = None
             ) -> tuple[DataFrame, dict[str, dict[str, Any]]]:
    """Read, check and join the sources into one lazy table holding every stored feature.

    For prediction only the model's inputs are required, and every column is kept. `main` stands for the main source's
    rows (a stream of them): no action runs on it, and the static sides it is joined with (lookups, the activity
    aggregate) are computed once and cached, not again for every micro-batch."""
    prep, spec = config.prepare, config.features
    main_src = config.sources[prep.main]
    table = sources.read(spark, prep.main, main_src) if main is None else main
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
        if main is not None:
            lookup = lookup.cache()
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
        assert counts is not None  # an aggregate without groups has one row
        source_rows[act.source] = {
            "location": src.location(), "rows": counts["rows"], "excluded": int(counts["excluded"] or 0),
            "excluded_reason": f"null key or timestamp, or on/after as_of {as_of.isoformat()}",
            "as_of": as_of.isoformat(),
        }
        key = spec.key
        assert key is not None  # activity joins on it (PrepareConfig.errors)
        aggregated = transforms.aggregate_activity(usable, act, as_of)
        if main is not None:
            # Kept as the join wants it: each micro-batch then shuffles only its own rows, into
            # one partition per core at most (one wave of tasks and of output files, not
            # spark.sql.shuffle.partitions of them for a micro-batch's few rows).
            partitions = min(int(spark.conf.get("spark.sql.shuffle.partitions") or 200),
                             sessions.default_parallelism(spark))
            aggregated = aggregated.repartition(partitions, act.key).sortWithinPartitions(act.key).cache()
        table = transforms.join_activity(table, aggregated, key.name, act.key)
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
        assert prep.split.column is not None  # mode = "column" names one (SplitConfig.errors)
        keep.append(prep.split.column)
    if columns.CORRUPT in table.columns:
        keep += [columns.CORRUPT, columns.SOURCE_FILE]
    return transforms.vectors_as_arrays(table.select(*dict.fromkeys(keep)), spec), source_rows


def _as_of(events: DataFrame, act) -> dt.date:
    if act.as_of:
        return dt.date.fromisoformat(act.as_of)
    row = events.agg(F.max(F.to_date(act.timestamp))).first()
    assert row is not None  # an aggregate without groups has one row
    last = row[0]
    return (last or dt.date.today()) + dt.timedelta(days=1)
