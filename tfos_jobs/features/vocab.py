"""Vocabularies computed in Spark: ordered by count (descending), then value (ascending),
keeping values seen at least `min_count` times, at most `top_k` of them."""
from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import CategoricalFeature


def compute(df: DataFrame, features: Sequence[CategoricalFeature]) -> dict[str, list[tuple[str, int]]]:
    """{feature: [(value, count), ...]} for every feature, in vocabulary order, in one Spark job."""
    if not features:
        return {}
    pairs = F.explode(F.array(*[
        F.struct(F.lit(f.name).alias("feature"), F.col(f.name).cast("string").alias("value")) for f in features
    ]))
    counts = df.select(pairs.alias("p")).select("p.feature", "p.value").where(F.col("value").isNotNull()) \
        .groupBy("feature", "value").count()
    min_count = _per_feature({f.name: f.min_count for f in features})
    top_k = _per_feature({f.name: f.top_k for f in features if f.top_k is not None})
    rank = F.row_number().over(Window.partitionBy("feature").orderBy(F.desc("count"), F.asc("value")))
    kept = counts.where(F.col("count") >= min_count).withColumn("rank", rank) \
        .where(top_k.isNull() | (F.col("rank") <= top_k))
    out: dict[str, list[tuple[str, int]]] = {f.name: [] for f in features}
    for row in sorted(kept.collect(), key=lambda r: (r["feature"], r["rank"])):
        out[row["feature"]].append((row["value"], row["count"]))
    for name, entries in out.items():
        bad = [v for v, _ in entries if "\n" in v or "\r" in v or v == ""]
        if bad:
            raise InputError(f"column {name!r}: vocabulary values cannot be empty or hold line breaks: {bad[:3]!r}")
    return out


def _per_feature(values: dict[str, int]):
    expr = F.lit(None).cast("long")
    for name, value in values.items():
        expr = F.when(F.col("feature") == name, F.lit(value)).otherwise(expr)
    return expr
