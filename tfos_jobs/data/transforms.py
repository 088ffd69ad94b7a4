"""The relational part of preparation: lookup joins, rejects, imputation (aggregates: `data.aggregates`).

Each function returns a lazy DataFrame or Column; the driver decides when jobs run."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tfos_jobs.config import SplitConfig
from tfos_jobs.contracts.dataset import ALL_SPLITS
from tfos_jobs.data import sources
from tfos_jobs.data import split as split_mod
from tfos_jobs.data.columns import CORRUPT
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import (SPARK_TYPES, CategoricalFeature, FeatureSpec, KeyFeature, Label, ListFeature,
                                     NumericFeature, TextFeature, VectorFeature)
from tfos_jobs.features.text import spark_elements
from tfos_jobs.tasks import Task

def join_lookup(main: DataFrame, lookup: DataFrame, left_on: str, right_on: str, source: str) -> DataFrame:
    """Left join a small table by broadcast; the lookup key column itself is not kept."""
    clash = (set(lookup.columns) - {right_on}) & set(main.columns)
    if clash:
        raise InputError(
            f"source {source!r} would add columns that already exist: {', '.join(sorted(clash))}; "
            "rename them in one of the sources"
        )
    joined = main.join(F.broadcast(lookup), main[left_on] == lookup[right_on], "left")
    return joined.drop(lookup[right_on])


def duplicate_keys(lookup: DataFrame, key: str, limit: int = 5) -> list:
    """Keys that appear more than once: a lookup with them would multiply rows of the main table."""
    dupes = lookup.groupBy(key).count().where("count > 1").limit(limit).collect()
    return [r[key] for r in dupes]


def reject_reason(spec: FeatureSpec, split: SplitConfig, columns: list[str]) -> Column:
    """Why a row cannot be used (null when it can). Rejected rows are written out and counted."""
    label: Label = spec.label
    y = F.col(label.name)
    checks: list[tuple[Column, str | Column]] = []
    if CORRUPT in columns:
        checks.append((F.col(CORRUPT).isNotNull(), "malformed input row (it does not parse as the source's schema)"))
    if spec.key is not None:
        checks.append((F.col(spec.key.name).isNull(), f"key {spec.key.name!r} is null"))
    checks.append((y.isNull(), f"label {label.name!r} is null"))
    if label.task == Task.BINARY:
        if label.positive:
            known = list(label.positive) + list(label.negative)
            checks.append((~y.cast("string").isin(known), f"label {label.name!r} is not one of {known}"))
        else:
            checks.append((~y.cast("long").isin(0, 1), f"label {label.name!r} is not 0 or 1"))
    elif label.task == Task.MULTICLASS and label.classes:
        checks.append((~y.cast("string").isin(list(label.classes)), f"label {label.name!r} is not one of {list(label.classes)}"))
    elif label.task == Task.REGRESSION:
        checks.append((F.isnan(y.cast("double")), f"label {label.name!r} is NaN"))
    for v in spec.vectors:
        values = F.col(v.name)
        checks.append((values.isNotNull() & (F.size(values) != v.dim), F.concat(
            F.lit(f"vector {v.name!r} has "), F.size(values).cast("string"), F.lit(f" values, not its dim {v.dim}"))))
        checks.append((values.isNotNull() & F.exists(values, lambda x: x.isNull()), f"vector {v.name!r} holds a null"))
    if split.mode == "column":
        names = ", ".join(f"'{s}'" for s in ALL_SPLITS)
        checks.append((split_mod.assign(split, None).isNull(), f"split column {split.column!r} is not one of {names}"))
    reason = F.lit(None).cast("string")
    for cond, text in reversed(checks):
        reason = F.when(cond, F.lit(text) if isinstance(text, str) else text).otherwise(reason)
    return reason


def vectors_as_arrays(df: DataFrame, spec: FeatureSpec) -> DataFrame:
    """Spark ML Vector columns of vector features as array<double> (in the JVM), as the other vectors come."""
    types = sources.column_types(df) if spec.vectors else {}
    ml = [v.name for v in spec.vectors if types.get(v.name) == "vector"]
    if not ml:  # nothing to convert (and a Connect client refuses an empty withColumns)
        return df
    from pyspark.ml.functions import vector_to_array

    return df.withColumns({name: vector_to_array(F.col(name)) for name in ml})


def impute(df: DataFrame, spec: FeatureSpec, numeric_defaults: Mapping[str, float]) -> DataFrame:
    """Replace missing values with the spec's defaults (numeric "mean" already resolved): a null text is the empty
    text, a null list empty, a null vector zeros. A list keeps its elements but null and empty ones, at most
    `max_length`; a text stays whole (the model tokenizes it)."""
    out = []
    for col in df.columns:
        f = _stored(spec, col)
        if isinstance(f, NumericFeature):
            c = F.col(col).cast("double")
            out.append(F.when(c.isNull() | F.isnan(c), F.lit(numeric_defaults[col])).otherwise(c).alias(col))
        elif isinstance(f, CategoricalFeature):
            value = F.coalesce(F.col(col).cast("string"), F.lit(f.default))
            if f.max_length is not None:
                value = F.substring(value, 1, f.max_length)
            out.append(value.alias(col))
        elif isinstance(f, TextFeature):
            out.append(F.coalesce(F.col(col), F.lit("")).alias(col))
        elif isinstance(f, ListFeature):
            out.append(spark_elements(F.col(col), f.max_length).alias(col))
        elif isinstance(f, VectorFeature):
            out.append(F.coalesce(F.col(col).cast("array<double>"), F.array_repeat(F.lit(0.0), f.dim)).alias(col))
        else:
            out.append(F.col(col))
    return df.select(out)


def record_columns(spec: FeatureSpec, classes: tuple[str, ...] = ()) -> list[Column]:
    """Stored columns cast to their record dtypes, the label encoded as the model expects it."""
    cols = []
    for name, dtype in spec.record_dtypes().items():
        f = spec.get(name)
        if isinstance(f, Label):
            cols.append(encode_label(f, classes).alias(name))
        elif isinstance(f, KeyFeature):
            cols.append(F.col(name).cast(SPARK_TYPES[f.dtype]).alias(name))
        elif isinstance(f, ListFeature):
            cols.append(F.slice(F.col(name).cast(f"array<{SPARK_TYPES[dtype]}>"), 1, f.max_length).alias(name))
        elif isinstance(f, VectorFeature):
            cols.append(F.col(name).cast(f"array<{SPARK_TYPES[dtype]}>").alias(name))
        else:
            cols.append(F.col(name).cast(SPARK_TYPES[dtype]).alias(name))
    return cols


def encode_label(label: Label, classes: tuple[str, ...]) -> Column:
    y = F.col(label.name)
    if label.task == Task.REGRESSION:
        return y.cast("float")
    if label.task == Task.BINARY:
        if label.positive:
            return F.when(y.cast("string").isin(list(label.positive)), 1).otherwise(0).cast("long")
        return y.cast("long")
    index = F.create_map(*[F.lit(x) for i, c in enumerate(classes) for x in (c, i)])
    return index[y.cast("string")].cast("long")


def _stored(spec: FeatureSpec, name: str):
    try:
        return spec.get(name)
    except KeyError:
        return None
