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
class LastValues:
    """The last `n` non-null values of column `last`, ordered by `order_by` (oldest first): a list feature such as a
    person's last pages, without the SQL it takes to say it."""

    last: str
    order_by: str
    n: int = 10


@dataclass(frozen=True)
class AggregateConfig:
    """Columns computed per key over the rows of a source (one groupBy, in the JVM) and left-joined to the main table by
    its key feature: a key without rows gets nulls, which the spec imputes and counts. Each column is a Spark SQL
    aggregate expression (`count(query)`, `concat_ws(' ', collect_list(query))`) or the last values of a column;
    `where`, a SQL condition on the source's rows, keeps later rows out (a cut-off date, so no future leaks in)."""

    source: str
    key: str
    columns: Mapping[str, Union[str, LastValues]]
    where: Union[str, None] = None

    def errors(self, where: str, sources: Mapping[str, SourceConfig]) -> list[str]:
        errs = unknown(sources, f"{where}.source", self.source)
        if not self.columns:
            errs.append(f"{where}.columns: give at least one column (name = \"a SQL aggregate expression\")")
        for name, column in self.columns.items():
            if isinstance(column, LastValues) and column.n < 1:
                errs.append(f"{where}.columns.{name}.n: must be >= 1, got {column.n}")
            elif isinstance(column, str) and not column.strip():
                errs.append(f"{where}.columns.{name}: an empty expression")
        return errs


@dataclass(frozen=True)
class SplitConfig:
    """Train/eval split: by a hash of the key column, by a column holding "train", "eval" or "test" (a held-out split),
    or by time (sensor windows). `eval_from_train`: the eval split is drawn by the key's hash, at `eval_fraction`, from
    the rows the column calls "train", so a column that separates train from test still leaves the test rows out of
    every choice made on eval.

    By time (`data.split`): each asset's series is cut at two instants, train before, eval between, test (optional)
    after; a window that spans an instant is in no split (counted as dropped). The instants are `eval_from` and
    `test_from` (ISO date-times, the same for every asset, read in the session's time zone as the sensor times are), or
    else, per asset, the last `test_fraction` of its time span is test and the `eval_fraction` before it eval."""

    mode: Literal["hash", "column", "time"] = "hash"
    eval_fraction: float = 0.2
    column: Union[str, None] = None
    salt: str = ""
    eval_from_train: bool = False
    test_fraction: float = 0.0
    eval_from: Union[str, None] = None
    test_from: Union[str, None] = None

    def errors(self, spec: FeatureSpec) -> list[str]:
        errs = []
        if not 0.0 < self.eval_fraction < 1.0:
            errs.append(f"prepare.split.eval_fraction: must be between 0 and 1 (exclusive), got {self.eval_fraction}")
        if not 0.0 <= self.test_fraction < 1.0 or self.eval_fraction + self.test_fraction >= 1.0:
            errs.append(f"prepare.split.test_fraction: must be in [0, 1) and leave train a part (eval_fraction + "
                        f"test_fraction < 1), got {self.test_fraction}")
        if self.mode != "time" and (self.test_fraction or self.eval_from or self.test_from):
            errs.append("prepare.split: test_fraction, eval_from and test_from apply to mode = \"time\" only")
        if self.mode == "time":
            errs += self._time_errors(spec)
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

    def _time_errors(self, spec: FeatureSpec) -> list[str]:
        if not spec.is_sequence:
            return ["prepare.split.mode: 'time' splits sensor windows (a spec with a time feature); rows split by "
                    "'hash' or 'column'"]
        errs, instants = [], {}
        for name in ("eval_from", "test_from"):
            value = getattr(self, name)
            if value is not None:
                try:
                    instants[name] = dt.datetime.fromisoformat(value)
                except ValueError:
                    errs.append(f"prepare.split.{name}: {value!r} is not an ISO date-time (YYYY-MM-DD[THH:MM:SS])")
        if "test_from" in instants and self.eval_from is None:
            errs.append("prepare.split.test_from: needs eval_from (the instants are given together, or neither)")
        if len(instants) == 2 and instants["eval_from"] >= instants["test_from"]:
            errs.append(f"prepare.split.eval_from: {self.eval_from!r} must come before test_from {self.test_from!r}")
        if self.eval_from is not None and self.test_fraction:
            errs.append("prepare.split.test_fraction: with eval_from, the test period starts at test_from")
        return errs


@dataclass(frozen=True)
class PrepareConfig:
    main: str
    output: str
    union: tuple[str, ...] = ()  # more sources with main's columns (e.g. the same table in another format), appended
    lookups: tuple[LookupConfig, ...] = ()
    activity: Union[ActivityConfig, None] = None
    aggregates: tuple[AggregateConfig, ...] = ()
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
        errs += self._aggregate_errors(sources, spec)
        errs += self.split.errors(spec)
        if self.files_per_split < 1:
            errs.append(f"prepare.files_per_split: must be >= 1, got {self.files_per_split}")
        if not self.output:
            errs.append("prepare.output: must not be empty")
        if spec.is_sequence and (self.lookups or self.activity is not None or self.aggregates):
            errs.append("prepare: lookups, activity and aggregates apply to row features, not to sequence windows")
        return errs

    def _aggregate_errors(self, sources: Mapping[str, SourceConfig], spec: FeatureSpec) -> list[str]:
        """Each entry's own problems, then the column names: one owner each (the main table's key, another aggregate);
        the main table's other columns are known once the sources are read (`data.aggregates`)."""
        errs: list[str] = []
        owner: dict[str, str] = {}
        if spec.key is not None:
            owner[spec.key.name] = "the main table's key"
        entry: dict[str, str] = {}
        for i, agg in enumerate(self.aggregates):
            where = f"prepare.aggregates[{i}]"
            errs += agg.errors(where, sources)
            if agg.source in entry:
                errs.append(f"{where}.source: {agg.source!r} has an entry already ({entry[agg.source]}): one entry, "
                            "one groupBy per source; a column of other rows takes `FILTER (WHERE ...)`")
            entry.setdefault(agg.source, where)
            for name in agg.columns:
                if name in owner:
                    errs.append(f"{where}.columns.{name}: also a column of {owner[name]}; give it another name")
                owner.setdefault(name, where)
        if self.aggregates and spec.key is None:
            errs.append("prepare.aggregates: joining aggregates needs a feature with kind = \"key\"")
        return errs
