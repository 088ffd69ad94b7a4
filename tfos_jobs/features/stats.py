"""Aggregations for the one pass over the prepared table: numeric statistics and missing counts.

They are returned as Spark Columns so the driver can run them all in a single job."""
from __future__ import annotations

from typing import Any, Sequence

from pyspark.sql import Column, Row
from pyspark.sql import functions as F

STATS = ("count", "mean", "std", "min", "max")


def present(name: str) -> Column:
    """The value when it is neither null nor NaN, else null: statistics ignore missing values."""
    c = F.col(name).cast("double")
    return F.when(~F.isnan(c), c)


def numeric_aggs(names: Sequence[str], where: Column) -> list[Column]:
    """count, mean, population std, min, max of each column over the rows matching `where`."""
    aggs = []
    for name in names:
        v = F.when(where, present(name))
        aggs += [
            F.count(v).alias(f"{name}__count"),
            F.mean(v).alias(f"{name}__mean"),
            F.stddev_pop(v).alias(f"{name}__std"),
            F.min(v).alias(f"{name}__min"),
            F.max(v).alias(f"{name}__max"),
        ]
    return aggs


def numeric_from_row(row: Row, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    return {name: {s: stable(row[f"{name}__{s}"]) for s in STATS} for name in names}


def stable(value: Any) -> Any:
    """12 significant digits: Spark may merge partial sums in any order, which moves the last
    bits of a mean; rounding keeps re-runs on the same input byte-identical."""
    return float(f"{value:.12g}") if isinstance(value, float) else value


def missing_aggs(names: Sequence[str], numeric: Sequence[str], where: Column) -> list[Column]:
    """Per column, rows matching `where` whose value is null (or NaN, for numeric columns)."""
    aggs = []
    for name in names:
        c = F.col(name)
        gone = c.isNull() | F.isnan(c.cast("double")) if name in numeric else c.isNull()
        aggs.append(F.sum(F.when(where & gone, 1).otherwise(0)).alias(f"{name}__missing"))
    return aggs


def any_missing(names: Sequence[str], numeric: Sequence[str]) -> Column:
    cond = F.lit(False)
    for name in names:
        c = F.col(name)
        cond = cond | (c.isNull() | F.isnan(c.cast("double")) if name in numeric else c.isNull())
    return cond
