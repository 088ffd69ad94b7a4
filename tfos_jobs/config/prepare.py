"""`[prepare]`: what the prepare job joins, aggregates, splits and writes."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal, Mapping, Union

from tfos_jobs.config.sources import SourceConfig, unknown
from tfos_jobs.features.spec import FeatureSpec


@dataclass(frozen=True)
class LookupConfig:
    """A small dimension table, broadcast-joined to the main table (left join)."""

    source: str
    left_on: str
    right_on: str


@dataclass(frozen=True)
class ActivityConfig:
    """An event log aggregated per example key into activity features."""

    source: str
    key: str
    timestamp: str = "ts"
    event_column: str = "event_type"
    click_value: str = "click"
    impression_value: str = "impression"
    as_of: Union[str, None] = None  # ISO date; events on or after it are excluded. Default: day after the last event.


@dataclass(frozen=True)
class SplitConfig:
    """Train/eval split: by a hash of the key column, or by a column holding "train", "eval" or
    "test" (a held-out split). `eval_from_train`: the eval split is drawn by the key's hash, at
    `eval_fraction`, from the rows the column calls "train", so a column that separates train
    from test still leaves the test rows out of every choice made on eval."""

    mode: Literal["hash", "column"] = "hash"
    eval_fraction: float = 0.2
    column: Union[str, None] = None
    salt: str = ""
    eval_from_train: bool = False

    def errors(self, spec: FeatureSpec) -> list[str]:
        errs = []
        if not 0.0 < self.eval_fraction < 1.0:
            errs.append(f"prepare.split.eval_fraction: must be between 0 and 1 (exclusive), got {self.eval_fraction}")
        if self.mode == "column" and not self.column:
            errs.append("prepare.split.column: required when prepare.split.mode = 'column'")
        if self.mode == "hash" and spec.key is None:
            errs.append("prepare.split.mode: 'hash' needs a feature with kind = \"key\" to hash")
        if self.eval_from_train and self.mode != "column":
            errs.append("prepare.split.eval_from_train: applies to mode = \"column\" only (mode = \"hash\" draws eval "
                        "from every row already)")
        elif self.eval_from_train and spec.key is None:
            errs.append("prepare.split.eval_from_train: needs a feature with kind = \"key\" to hash")
        return errs


@dataclass(frozen=True)
class PrepareConfig:
    main: str
    output: str
    union: tuple[str, ...] = ()  # more sources with main's columns (e.g. the same table in another format), appended
    lookups: tuple[LookupConfig, ...] = ()
    activity: Union[ActivityConfig, None] = None
    split: SplitConfig = SplitConfig()
    files_per_split: int = 8
    compression: Literal["none", "gzip"] = "none"
    tfrecord_format: str = "tfos.spark.tfrecord"
    bad_rows: Literal["quarantine", "strict"] = "quarantine"  # malformed CSV/JSON rows: set aside, or fail
    overwrite: bool = False

    def errors(self, sources: Mapping[str, SourceConfig], spec: FeatureSpec) -> list[str]:
        errs = unknown(sources, "prepare.main", self.main)
        for i, name in enumerate(self.union):
            errs += unknown(sources, f"prepare.union[{i}]", name)
        for i, lk in enumerate(self.lookups):
            errs += unknown(sources, f"prepare.lookups[{i}].source", lk.source)
        if self.activity is not None:
            act = self.activity
            errs += unknown(sources, "prepare.activity.source", act.source)
            if act.as_of is not None:
                try:
                    dt.date.fromisoformat(act.as_of)
                except ValueError:
                    errs.append(f"prepare.activity.as_of: {act.as_of!r} is not an ISO date (YYYY-MM-DD)")
            if spec.key is None:
                errs.append("prepare.activity: joining activity needs a feature with kind = \"key\"")
        errs += self.split.errors(spec)
        if self.files_per_split < 1:
            errs.append(f"prepare.files_per_split: must be >= 1, got {self.files_per_split}")
        if not self.output:
            errs.append("prepare.output: must not be empty")
        if spec.is_sequence and (self.lookups or self.activity is not None):
            errs.append("prepare: lookups and activity apply to row features, not to sequence windows")
        return errs
