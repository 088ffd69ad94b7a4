"""Vocabularies computed in Spark: ordered by count (descending), then value (ascending),
keeping values seen at least `min_count` times, at most `top_k` of them.

A row adds one entry to a categorical's vocabulary (its value), several to a text's (its tokens,
as the model's graph makes them: `features.text`) and to a list's (its elements)."""
from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import CategoricalFeature, ListFeature, TextFeature
from tfos_jobs.features.text import spark_elements, spark_tokens

Vocabulary = CategoricalFeature | TextFeature | ListFeature


def compute(df: DataFrame, features: Sequence[Vocabulary]) -> dict[str, list[tuple[str, int]]]:
    """{feature: [(value, count), ...]} for every feature, in vocabulary order, in one Spark job."""
    if not features:
        return {}
    out: dict[str, list[tuple[str, int]]] = {f.name: [] for f in features}
    for row in sorted(kept(df, features).collect(), key=lambda r: (r["feature"], r["rank"])):
        out[row["feature"]].append((row["value"], row["count"]))
    for name, found in out.items():
        bad = [v for v, _ in found if "\n" in v or "\r" in v or v == ""]
        if bad:
            raise InputError(f"column {name!r}: vocabulary values cannot be empty or hold line breaks: {bad[:3]!r}")
    return out


def kept(df: DataFrame, features: Sequence[Vocabulary]) -> DataFrame:
    """The entries each vocabulary keeps, lazily: feature, value, count, rank (1 first)."""
    pairs = F.explode(F.flatten(F.array(*[_tagged(f.name, entries(f)) for f in features])))
    counts = df.select(pairs.alias("p")).select("p.feature", "p.value").where(F.col("value").isNotNull()) \
        .groupBy("feature", "value").count()
    min_count = _per_feature({f.name: f.min_count for f in features})
    top_k = _per_feature({f.name: f.top_k for f in features if f.top_k is not None})
    rank = F.row_number().over(Window.partitionBy("feature").orderBy(F.desc("count"), F.asc("value")))
    return counts.where(F.col("count") >= min_count).withColumn("rank", rank) \
        .where(top_k.isNull() | (F.col("rank") <= top_k))


def entries(f: Vocabulary) -> Column:
    """What one row adds to the feature's vocabulary, as array<string>."""
    if isinstance(f, TextFeature):
        return spark_tokens(F.col(f.name), f)
    if isinstance(f, ListFeature):
        return spark_elements(F.col(f.name), f.max_length)
    return F.array(F.col(f.name).cast("string"))


def _tagged(name: str, values: Column) -> Column:
    return F.transform(values, lambda v: F.struct(F.lit(name).alias("feature"), v.alias("value")))


def _per_feature(values: dict[str, int]):
    expr = F.lit(None).cast("long")
    for name, value in values.items():
        expr = F.when(F.col("feature") == name, F.lit(value)).otherwise(expr)
    return expr
