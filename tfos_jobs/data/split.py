"""The train/eval split, and the rule that keeps either split from coming out empty.

By hash (the default): a key goes to eval when the salted hash of its value falls below
`eval_fraction` of the hash range, so each key is in one split only and a re-run draws the same
split. With few keys the draw can leave a split without any: 10 assets at eval_fraction 0.2 put
none in eval about one time in nine (0.8^10). Then the key nearest the boundary crosses it: the
usable key with the lowest hash goes to eval (or, when eval took every key, the one with the
highest hash goes to train). Both splits therefore hold a key whenever two or more keys are
usable; with fewer, prepare stops with an error naming the count and the setting. The boundary
used is kept in the manifest (`split.eval_below`), so whoever later needs a key's split
(`tfos evaluate`) draws the same one.

By time (sensor windows): each asset's series is cut at two instants, the same for all
(`eval_from`, `test_from`) or its own (the last `test_fraction` of its span is test, the
`eval_fraction` before it eval); a window ending before the first is train, one starting at or
after it eval, at or after the second test. A window that spans an instant is in no split:
prepare counts it as dropped (`BOUNDARY`), so no row of a train window is in an eval or test
window. The instants are derived again from the same windows by whoever needs a window's
split, as the hash is.

By column: a column says "train", "eval" or "test" for each row; train or eval left empty is
an error, test is optional (a held-out split, scored once after training). With
`eval_from_train`, eval is drawn by the key's hash from the rows the column calls train.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from tfos_jobs.config import SplitConfig
from tfos_jobs.contracts.dataset import ALL_SPLITS, Split
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START

HASH_BUCKETS = 1_000_000
BOUNDARY = "split_boundary"  # a window's drop reason: it spans the instant between two time splits


def nominal_boundary(split: SplitConfig) -> int:
    """The hash bucket below which a key is eval, as `eval_fraction` says."""
    return int(round(split.eval_fraction * HASH_BUCKETS))


def bucket(split: SplitConfig, key: str) -> Column:
    return F.pmod(F.xxhash64(F.lit(split.salt), F.col(key)), F.lit(HASH_BUCKETS))


def assign(split: SplitConfig, key: str | None, eval_below: int | None = None) -> Column:
    """"train", "eval" (or, by column, "test") per row, deterministic: a salted hash of the key
    below `eval_below` (default: the nominal boundary), or a column's value (null when it names
    no split), its "train" rows hashed again with `eval_from_train`."""
    if split.mode == "time":
        assert key is not None  # windows have a key (FeatureSpec.errors)
        return by_time(split, key)

    def by_hash() -> Column:
        assert key is not None  # hashing needs a key feature (SplitConfig.errors)
        below = nominal_boundary(split) if eval_below is None else eval_below
        return F.when(bucket(split, key) < below, Split.EVAL.value).otherwise(Split.TRAIN.value)

    if split.mode != "column":
        return by_hash()
    assert split.column is not None  # mode = "column" names one (SplitConfig.errors)
    value = F.lower(F.col(split.column))
    named = F.when(value.isin(*ALL_SPLITS), value)
    if not split.eval_from_train or key is None:  # no key: only which split the column names
        return named
    return F.when(value == Split.TRAIN.value, by_hash()).otherwise(named)


def by_time(split: SplitConfig, key: str) -> Column:
    """"train", "eval", "test" or null (spans an instant) per window: rows with `key`,
    `window_start` and `window_end` (epoch seconds), each asset's windows all present."""
    start, end = F.col(WINDOW_START).cast("long"), F.col(WINDOW_END).cast("long")
    if split.eval_from is not None:
        eval_at = F.lit(split.eval_from).cast("timestamp").cast("long")
        test_at = F.lit(split.test_from).cast("timestamp").cast("long") if split.test_from else None
    else:
        asset = Window.partitionBy(key)
        lo, hi = F.min(start).over(asset), F.max(end).over(asset)
        span = hi - lo
        test_at = hi - F.lit(split.test_fraction) * span if split.test_fraction else None
        eval_at = hi - F.lit(split.test_fraction + split.eval_fraction) * span
    is_eval = start >= eval_at if test_at is None else (start >= eval_at) & (end < test_at)
    chosen = F.when(end < eval_at, Split.TRAIN.value).when(is_eval, Split.EVAL.value)
    return chosen if test_at is None else chosen.when(start >= test_at, Split.TEST.value)


def settle(usable: DataFrame, split: SplitConfig, key: str | None, sizes: Mapping[str, int]
           ) -> tuple[int | None, str | None]:
    """The boundary to split at (None for a column split) and, when the nominal one left a split empty, a sentence
    saying which key crossed it. `usable`: the rows that will be written; `sizes`: what each split holds of them at the
    nominal boundary (both empty is the caller's error, raised before)."""
    if sizes[Split.TRAIN] and sizes[Split.EVAL]:
        hashed = split.mode == "hash" or split.mode == "column" and split.eval_from_train
        return (nominal_boundary(split) if hashed else None), None
    empty, full = (Split.EVAL, Split.TRAIN) if not sizes[Split.EVAL] else (Split.TRAIN, Split.EVAL)
    if split.mode == "time":
        where = (f"eval_from = {split.eval_from!r}" + (f", test_from = {split.test_from!r}" if split.test_from else "")
                 if split.eval_from else f"eval_fraction = {split.eval_fraction}, test_fraction = {split.test_fraction}")
        raise InputError(f"prepare.split (mode = \"time\", {where}): no usable window is {empty!r} "
                         f"({sizes[Split.TRAIN]:,} assets with train windows, {sizes[Split.EVAL]:,} with eval windows); a model needs both splits: "
                         "move the instants inside the data's time range, or give each asset a longer series")
    if split.mode == "column" and not split.eval_from_train:
        raise InputError(f"prepare.split.column {split.column!r}: no usable row is {empty!r} "
                         f"({sizes[Split.TRAIN]:,} train, {sizes[Split.EVAL]:,} eval); a model needs both splits")
    if split.mode == "column":  # eval is drawn from the rows the column calls train
        assert split.column is not None  # mode = "column" names one (SplitConfig.errors)
        usable = usable.where(F.lower(F.col(split.column)) == Split.TRAIN.value)
    assert key is not None  # hashing needs a key feature (SplitConfig.errors)
    b = bucket(split, key)
    row = usable.agg(F.countDistinct(key).alias("keys"), F.min(b).alias("lo"), F.max(b).alias("hi")).first()
    assert row is not None  # an aggregate without groups has one row
    keys = int(row["keys"])
    if keys < 2:
        raise InputError(f"prepare.split.eval_fraction = {split.eval_fraction}: the usable data holds {keys} value(s) "
                         f"of the key {key!r}, all in {full}; a split by key needs at least 2 (one for train, one "
                         f"for eval): add data, or give the rows a column that says train or eval "
                         f"(prepare.split.mode = \"column\")")
    boundary, which = (int(row["lo"]) + 1, "lowest") if empty == Split.EVAL else (int(row["hi"]), "highest")
    note = (f"eval_fraction = {split.eval_fraction} put all {keys} values of {key!r} in {full}; "
            f"the one with the {which} hash went to {empty}")
    return boundary, note


def describe(split: SplitConfig, eval_below: int | None, note: str | None) -> dict[str, Any]:
    """The manifest's `split` entry: the settings, the boundary used, and why it moved, if it did."""
    return {**dataclasses.asdict(split), "eval_below": eval_below, "adjusted": note}


def from_manifest(entry: Mapping[str, Any]) -> tuple[SplitConfig, int | None]:
    """The split settings and boundary a dataset was prepared with (`describe`'s output)."""
    fields = {f.name for f in dataclasses.fields(SplitConfig)}
    split = SplitConfig(**{k: v for k, v in entry.items() if k in fields})
    return split, entry.get("eval_below")
