"""Aggregates users write (`[[prepare.aggregates]]`, one entry per source) and the activity (`[prepare.activity]`):
columns computed per key over a source's rows, one groupBy per entry, in the JVM, left-joined to the main table by its
key feature.

`analysed` builds every aggregate lazily and lets Spark analyse it, so a wrong source, key, condition or expression is
named before any Spark job runs; `join` adds the result to the main table."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Mapping

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs import sessions
from tfos_jobs.config import ActivityConfig, AggregateConfig, Config, LastValues
from tfos_jobs.data import sources
from tfos_jobs.data.columns import ACTIVE_DAYS, CTR, DAYS_SINCE_LAST, EVENT_COUNT
from tfos_jobs.errors import ConfigError, InputError

JOIN_KEY = "__aggregate_key"  # the aggregate's key while it is joined (the main table keeps its own)


@dataclass(frozen=True)
class Aggregated:
    """An aggregate (`setting`: its config key, e.g. "prepare.aggregates[0]") and its rows, one per key, not yet
    computed, from the source's rows as `read`; a key without rows gets 0 in the columns `zeros` names, null in the
    others."""

    setting: str
    config: AggregateConfig
    rows: DataFrame
    read: DataFrame
    zeros: tuple[str, ...] = ()

    def counts(self) -> dict[str, object]:
        """The source's rows and those `where` left out, for the manifest (a Spark job)."""
        if not self.config.where:
            return {"rows": self.read.count()}
        kept = F.expr(self.config.where)
        row = self.read.agg(F.count(F.lit(1)).alias("rows"), F.sum(F.when(kept, 0).otherwise(1)).alias("excluded")).first()
        assert row is not None  # an aggregate without groups has one row
        return {"rows": row["rows"], "excluded": int(row["excluded"] or 0), "excluded_reason": f"not {self.config.where}"}


def activity(act: ActivityConfig, as_of: dt.date) -> AggregateConfig:
    """`[prepare.activity]` as the aggregate it is: per key, the number of events, distinct active days, clicks per
    impression and days since the last event, over the events with a key and a timestamp strictly before `as_of`."""
    ts, kind = _name(act.timestamp), _name(act.event_column)
    clicks = f"sum(CASE WHEN {kind} = {_text(act.click_value)} THEN 1 ELSE 0 END)"
    impressions = f"sum(CASE WHEN {kind} = {_text(act.impression_value)} THEN 1 ELSE 0 END)"
    return AggregateConfig(
        source=act.source, key=act.key,
        where=f"{_name(act.key)} IS NOT NULL AND {ts} IS NOT NULL AND {ts} < CAST(DATE'{as_of}' AS TIMESTAMP)",
        columns={
            EVENT_COUNT: "count(1)",
            ACTIVE_DAYS: f"count(DISTINCT to_date({ts}))",
            CTR: f"CAST({clicks} / nullif({impressions}, 0) AS DOUBLE)",
            DAYS_SINCE_LAST: f"CAST(datediff(DATE'{as_of}', to_date(max({ts}))) AS BIGINT)",
        })


def _name(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def _text(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def last_values(last: LastValues) -> Column:
    """The last `n` values of `last` by `order_by`, oldest first; rows where either is null are left out. Sorted on
    (order_by, value), so ties come out the same every time."""
    pairs = F.collect_list(F.when(F.col(last.last).isNotNull() & F.col(last.order_by).isNotNull(),
                                  F.struct(F.col(last.order_by).alias("o"), F.col(last.last).alias("v"))))
    values = F.transform(F.array_sort(pairs), lambda e: e["v"])
    return F.slice(values, F.greatest(F.size(values) - last.n + 1, F.lit(1)), F.lit(last.n))


def column(expression: str | LastValues) -> Column:
    """An output column as Spark computes it: a SQL aggregate expression, or the last values of a column."""
    return last_values(expression) if isinstance(expression, LastValues) else F.expr(expression)


def analysed(spark: SparkSession, config: Config, taken: Mapping[str, str]) -> list[Aggregated]:
    """Every aggregate of `config.prepare`, analysed and not yet run. `taken`: the main table's columns (with its
    lookups'), each with the source it comes from; an output column may not be one of them."""
    out = []
    for i, agg in enumerate(config.prepare.aggregates):
        where = f"prepare.aggregates[{i}]"
        src = config.sources[agg.source]
        read = rows = sources.read(spark, agg.source, src)
        sources.require_columns(agg.source, src, rows, {agg.key: ()})
        for name in agg.columns:
            if name in taken:
                raise InputError(f"{where}.columns.{name}: the main table has a column {name!r} already (from source "
                                 f"{taken[name]!r}); give the aggregate another name")
        if agg.where:
            rows = _analyse(lambda: rows.where(agg.where), f"{where}.where: {agg.where!r}")
        out.append(Aggregated(where, agg, grouped(rows, agg, where), read))
    return out


def grouped(rows: DataFrame, agg: AggregateConfig, where: str) -> DataFrame:
    """One groupBy of all the entry's columns; when Spark refuses it, the first column it refuses alone is named."""
    try:
        return _analyse(lambda: rows.groupBy(agg.key).agg(*[column(e).alias(n) for n, e in agg.columns.items()]),
                        f"{where}.columns")
    except ConfigError:
        for name, expression in agg.columns.items():
            shown = expression if isinstance(expression, str) else f"the last {expression.n} {expression.last!r}"
            _analyse(lambda: rows.groupBy(agg.key).agg(column(expression).alias(name)),
                     f"{where}.columns.{name}: {shown!r}")
        raise


def _analyse(build, what: str) -> DataFrame:
    """`build()`, analysed now (its schema asked for: a Connect client analyses only then)."""
    try:
        df = build()
        df.schema
        return df
    except AnalysisException as e:
        raise ConfigError(f"{what}: Spark cannot analyse it: {str(e).splitlines()[0]}") from None


def for_stream(spark: SparkSession, aggregated: DataFrame, key: str) -> DataFrame:
    """The aggregate computed once and kept as the join wants it: each micro-batch then shuffles only its own rows,
    into one partition per core at most (one wave of tasks and of output files, not spark.sql.shuffle.partitions of
    them for a micro-batch's few rows)."""
    partitions = min(int(spark.conf.get("spark.sql.shuffle.partitions") or 200), sessions.default_parallelism(spark))
    return aggregated.repartition(partitions, key).sortWithinPartitions(key).cache()


def join(main: DataFrame, aggregated: DataFrame, main_key: str, key: str, zeros: tuple[str, ...] = ()) -> DataFrame:
    """Left join by key: a key without rows gets nulls (the spec imputes them), or 0 in the columns `zeros` names."""
    aggregated = aggregated.withColumnRenamed(key, JOIN_KEY)
    joined = main.join(aggregated, main[main_key] == aggregated[JOIN_KEY], "left").drop(JOIN_KEY)
    return joined.fillna(0, subset=list(zeros)) if zeros else joined
