"""Aggregations for the one pass over the prepared table: numeric statistics, missing values, and
what imputation cuts (long values) or leaves out (a list's null and empty elements).

They are returned as Spark Columns so the driver can run them all in a single job. Quantile
bins (for piecewise-linear encodings) take one more job, over the train rows only."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from tfos_jobs.features.spec import CategoricalFeature, Feature, ListFeature, TextFeature
from tfos_jobs.features.text import spark_elements, spark_words

STATS = ("count", "mean", "std", "min", "max")
QUANTILE_ERROR = 1e-3  # approxQuantile's relative error: a bin edge is off by at most 0.1% of the rows


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


def truncated_aggs(features: Sequence[Feature], where: Column) -> dict[str, Column]:
    """{feature: `<feature>__truncated`} for each feature whose values are cut: the rows matching `where` it cuts: a categorical longer than its `max_length`
    characters, a text of more words than `max_tokens`, a list of more elements (those kept) than `max_length`."""
    aggs = {}
    for f in features:
        c = F.col(f.name)
        if isinstance(f, CategoricalFeature) and f.max_length is not None:
            cut = F.length(c) > f.max_length
        elif isinstance(f, TextFeature):
            cut = F.size(spark_words(c)) > f.max_tokens
        elif isinstance(f, ListFeature):
            cut = F.size(spark_elements(c)) > f.max_length
        else:
            continue
        aggs[f.name] = F.sum(F.when(where & cut, 1).otherwise(0)).alias(f"{f.name}__truncated")
    return aggs


def dropped_aggs(lists: Sequence[ListFeature], where: Column) -> list[Column]:
    """Per list, the null and empty elements left out (`spark_elements`) of the rows matching `where`."""
    return [F.sum(F.when(where & F.col(f.name).isNotNull(), F.size(f.name) - F.size(spark_elements(F.col(f.name))))
                  .otherwise(0)).alias(f"{f.name}__dropped") for f in lists]


def any_missing(names: Sequence[str], numeric: Sequence[str]) -> Column:
    cond = F.lit(False)
    for name in names:
        c = F.col(name)
        cond = cond | (c.isNull() | F.isnan(c.cast("double")) if name in numeric else c.isNull())
    return cond


def quantile_bins(train: DataFrame, bins: dict[str, int]) -> dict[str, list[float]]:
    """Per column, the edges of `bins[column]` bins holding equal shares of the train rows (missing values left out), in
    one job, as float32 values. Equal edges (a value most rows share) are merged, so a column may get fewer bins; a
    constant one gets a single bin one unit wide."""
    if not bins:
        return {}
    names = list(bins)
    ask = sorted({i / n for n in bins.values() for i in range(n + 1)})
    values = train.select(*[present(n).alias(n) for n in names]).approxQuantile(names, ask, QUANTILE_ERROR)
    out = {}
    for name, quantiles in zip(names, values):
        if not quantiles:
            raise ValueError(f"features.{name}: every train value is missing, so its bins have no edges")
        at = dict(zip(ask, quantiles))
        # as the model holds them (float32): edges that would meet there are merged here
        edges = sorted({float(np.float32(at[i / bins[name]])) for i in range(bins[name] + 1)})
        out[name] = edges if len(edges) > 1 else [edges[0], edges[0] + 1.0]
    return out
