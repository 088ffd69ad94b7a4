"""`tfos sources`: read every configured source as prepare would, and say how it was read.

Per source: its columns, rows, the tasks that read it, the files read (for files and catalog tables, after partition
pruning) and the filters Spark pushed to the data source or used to prune partitions. A source that cannot be read is
reported with the same error prepare would give, and the others are still checked. Then the joined row sources are
checked against the feature spec.
"""
from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession

from tfos_jobs import driver_calls, sessions
from tfos_jobs.config import Config
from tfos_jobs.data import sources
from tfos_jobs.errors import TfosError

_PLAN_FILTERS = {"partition_filters": "PartitionFilters", "pushed_filters": "PushedFilters"}


@dataclass
class SourceReport:
    name: str
    format: str
    location: str
    columns: dict[str, str] = field(default_factory=dict)
    rows: int | None = None
    read_tasks: int | None = None
    files: int | None = None
    partition_filters: list[str] = field(default_factory=list)
    pushed_filters: list[str] = field(default_factory=list)
    error: str | None = None


def describe(spark: SparkSession, name: str, src, count: bool = True) -> SourceReport:
    report = SourceReport(name, src.format, src.location())
    try:
        df = sources.read(spark, name, src)
    except TfosError as e:
        report.error = str(e)
        return report
    report.columns = sources.column_types(df)
    plan = sessions.physical_plan(df)
    for attr, label in _PLAN_FILTERS.items():
        setattr(report, attr, _plan_list(plan, label))
    if src.format != "jdbc":
        report.files = len(df.inputFiles())
    if count:
        report.rows, report.read_tasks = _count_with_tasks(spark, df)
    return report


def run(spark: SparkSession, config: Config, names: list[str] | None = None, count: bool = True,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    unknown = [n for n in names or [] if n not in config.sources]
    if unknown:
        raise TfosError(f"no source named {', '.join(map(repr, unknown))}; sources: {', '.join(config.sources)}")
    reports = [describe(spark, n, config.sources[n], count) for n in names or config.sources]
    spec_error, spec_line = None, None
    if not names and not config.features.is_sequence:
        unreadable = [r.name for r in reports if r.error and r.name in joined_sources(config)]
        if unreadable:
            spec_line = f"not checked: {', '.join(unreadable)} cannot be read"
        else:
            from tfos_jobs.data.assemble import assemble

            try:
                assemble(spark, config)
                spec_line = "every feature is provided"
            except TfosError as e:
                spec_error = spec_line = str(e)
    for line in table(reports):
        log(line)
    if spec_line:
        log(f"feature spec: {spec_line}")
    return {"sources": [dataclasses.asdict(r) for r in reports], "spec_error": spec_error,
            "ok": spec_error is None and not any(r.error for r in reports)}


def joined_sources(config: Config) -> set[str]:
    """The sources prepare joins into rows: main, its unions, lookups, activity and aggregates."""
    prep = config.prepare
    names = {prep.main, *prep.union, *(lk.source for lk in prep.lookups), *(a.source for a in prep.aggregates)}
    return names | ({prep.activity.source} if prep.activity else set())


def table(reports: list[SourceReport]) -> list[str]:
    lines = []
    for r in reports:
        if r.error:
            lines.append(f"{r.name}: ERROR {r.error}")
            continue
        facts = [f"{r.format} {r.location}", f"{len(r.columns)} columns"]
        if r.rows is not None:
            facts.append(f"{r.rows:,} rows in {r.read_tasks} tasks")
        if r.files is not None:
            facts.append(f"{r.files} files")
        if r.partition_filters:
            facts.append("partitions: " + ", ".join(r.partition_filters))
        if r.pushed_filters:
            facts.append("pushed down: " + ", ".join(r.pushed_filters))
        lines.append(f"{r.name}: " + "; ".join(facts))
    return lines


def _plan_list(plan: str, label: str) -> list[str]:
    """The entries of `Label: [a, b]` in a physical plan's text (the first scan that has them)."""
    m = re.search(label + r": \[(.*?)\](?:,|\n|$)", plan)
    if not m or not m.group(1).strip():
        return []
    text = re.sub(r"#\d+L?\b", "", m.group(1))  # expression ids: dt#12 -> dt
    return [p.strip() for p in re.split(r", (?![^()]*\))", text) if p.strip()]


def _count_with_tasks(spark: SparkSession, df: DataFrame) -> tuple[int, int]:
    """Rows, and the tasks of the stage that read them (the count job's first stage)."""
    tag = f"tfos-sources-{uuid.uuid4().hex[:8]}"
    with sessions.tagged(spark, tag):
        rows = df.count()
    return rows, int(driver_calls.call(spark, driver_calls.JOB_TASKS, tag=tag))
