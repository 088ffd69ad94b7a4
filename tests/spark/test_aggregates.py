"""Aggregates per key (`[prepare.activity]` and `[[prepare.aggregates]]`) against hand-computed rows: the last values
in order, the where filter, nulls for keys without rows; what Spark refuses, named before any job; and prepare's plans,
texts, lists and aggregates included, in the JVM without a Python UDF."""
from __future__ import annotations

import dataclasses
import datetime as dt
import re

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import api
from tfos_jobs.config import (ActivityConfig, AggregateConfig, Config, LastValues, LookupConfig, PrepareConfig,
                              SourceConfig)
from tfos_jobs.config.loading import build_spec
from tfos_jobs.data import aggregates, synthetic, transforms
from tfos_jobs.data.columns import ACTIVE_DAYS, EVENT_COUNT
from tfos_jobs.errors import ConfigError, InputError

from tests.conftest import CENSUS, ROOT, census_overrides

ACT = ActivityConfig(source="events", key="pid")
AS_OF = dt.date(2026, 1, 1)
CUT = "ts < TIMESTAMP'2026-01-01 00:00:00'"


def ts(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s)


@pytest.fixture(scope="module")
def events(spark):
    rows = [
        (1, ts("2025-12-01 10:00:00"), "impression"),
        (1, ts("2025-12-01 11:00:00"), "click"),
        (1, ts("2025-12-20 09:00:00"), "impression"),
        (1, ts("2025-12-30 23:59:59"), "impression"),
        (2, ts("2025-11-02 08:00:00"), "click"),          # clicks but no impressions: ctr undefined
        (2, ts("2026-01-03 08:00:00"), "impression"),     # after as_of: excluded
        (None, ts("2025-12-05 08:00:00"), "impression"),  # no key: excluded
        (3, None, "impression"),                          # no timestamp: excluded
    ]
    return spark.createDataFrame(rows, "pid long, ts timestamp, event_type string")


def activity_rows(events):
    agg = aggregates.activity(ACT, AS_OF)
    return aggregates.grouped(events.where(agg.where), agg, "prepare.activity")


def test_activity_aggregates_match_hand_computation(spark, events):
    expected = spark.createDataFrame(
        [(1, 4, 3, 1 / 3, 2), (2, 1, 1, None, 60)],
        "pid long, event_count long, active_days long, ctr double, days_since_last long",
    )
    assertDataFrameEqual(activity_rows(events), expected)


def test_activity_window_counts_what_it_leaves_out(events):
    usable = F.expr(aggregates.activity(ACT, AS_OF).where)
    excluded = events.agg(F.sum(F.when(usable, 0).otherwise(1))).first()[0]
    assert excluded == 3


def test_people_join_regions_and_activity(spark, events):
    people = spark.createDataFrame(
        [(1, "US", 30), (2, "DE", 40), (3, "XX", 50), (4, None, 60)],
        "pid long, country string, age int",
    )
    regions = spark.createDataFrame([("US", "NA", 65.0), ("DE", "EU", 46.0)], "code string, region string, gdp double")
    joined = transforms.join_lookup(people, regions, "country", "code", "regions")
    joined = aggregates.join(joined, activity_rows(events), "pid", "pid", zeros=(EVENT_COUNT, ACTIVE_DAYS))
    expected = spark.createDataFrame(
        [
            (1, "US", 30, "NA", 65.0, 4, 3, 1 / 3, 2),
            (2, "DE", 40, "EU", 46.0, 1, 1, None, 60),
            (3, "XX", 50, None, None, 0, 0, None, None),
            (4, None, 60, None, None, 0, 0, None, None),
        ],
        "pid long, country string, age int, region string, gdp double, event_count long, "
        "active_days long, ctr double, days_since_last long",
    )
    assertDataFrameEqual(joined, expected)


VISITS = [  # person, time, page, search text
    (1, ts("2025-12-01 10:00:00"), "/a", None),
    (1, ts("2025-12-03 10:00:00"), "/c", None),
    (1, ts("2025-12-02 10:00:00"), "/search", "cheap flights"),
    (1, ts("2025-12-02 10:00:00"), "/b", None),             # the same time: ordered by page after the time
    (1, ts("2026-01-02 10:00:00"), "/late", "future query"),  # after the cut-off: left out by `where`
    (2, ts("2025-11-01 10:00:00"), "/a", None),
    (2, ts("2025-11-02 10:00:00"), None, None),             # no page: not one of the last values
    (2, None, "/no-time", None),                            # no time: not one of the last values either
    (3, ts("2026-02-01 10:00:00"), "/x", "later"),          # only rows after the cut-off: as a key without rows
]


@pytest.fixture(scope="module")
def visits(spark):
    spark.createDataFrame([(1, 30), (2, 40), (3, 50), (4, 60)], "pid long, age int") \
        .createOrReplaceTempView("agg_people")
    spark.createDataFrame(VISITS, "person long, ts timestamp, page string, query string") \
        .createOrReplaceTempView("agg_visits")
    return spark.table("agg_people")


def config_of(*entries: AggregateConfig, spec: dict | None = None) -> Config:
    spec = spec or {"pid": {"kind": "key"}, "age": {"kind": "numeric"}, "y": {"kind": "label", "task": "regression"}}
    sources = {"people": SourceConfig(format="table", table="agg_people"),
               "visits": SourceConfig(format="table", table="agg_visits")}
    return Config(features=build_spec(spec), sources=sources,
                  prepare=PrepareConfig(main="people", output="unused", aggregates=entries))


def visits_of(columns: dict, where: str | None = CUT) -> AggregateConfig:
    return AggregateConfig(source="visits", key="person", columns=columns, where=where)


def test_the_last_values_the_texts_and_the_counts_per_key_joined_to_every_row(spark, visits):
    entry = visits_of({
        "recent": LastValues(last="page", order_by="ts", n=2),
        "pages": LastValues(last="page", order_by="ts", n=10),
        "queries": "concat_ws(' ', transform(array_sort(collect_list(struct(ts, query))), e -> e.query))",
        "n_searches": "count(query)",
    })
    [agg] = aggregates.analysed(spark, config_of(entry), {"pid": "people", "age": "people"})
    joined = aggregates.join(visits, agg.rows, "pid", "person")
    expected = spark.createDataFrame([
        (1, 30, ["/search", "/c"], ["/a", "/b", "/search", "/c"], "cheap flights", 1),
        (2, 40, ["/a"], ["/a"], "", 0),
        (3, 50, None, None, None, None),  # every row after the cut-off
        (4, 60, None, None, None, None),  # no row at all
    ], "pid long, age int, recent array<string>, pages array<string>, queries string, n_searches long")
    assertDataFrameEqual(joined, expected)


def test_without_a_where_every_row_counts(spark, visits):
    [agg] = aggregates.analysed(spark, config_of(visits_of({"n": "count(1)"}, where=None)), {})
    expected = spark.createDataFrame([(1, 5), (2, 3), (3, 1)], "person long, n long")
    assertDataFrameEqual(agg.rows, expected)


@pytest.mark.parametrize("entry, message", [
    (visits_of({"n": "count(1)", "bad": "sum(nope)"}),
     r"prepare.aggregates\[0\].columns.bad: 'sum\(nope\)': Spark cannot analyse it: .*nope"),
    (visits_of({"page": "page"}), r"prepare.aggregates\[0\].columns.page: 'page': Spark cannot analyse it"),
    (visits_of({"n": "count(1"}), r"prepare.aggregates\[0\].columns.n: 'count\(1': Spark cannot analyse it"),
    (visits_of({"n": "count(1)"}, where="tss < 3"), r"prepare.aggregates\[0\].where: 'tss < 3': Spark cannot analyse"),
    (visits_of({"last": LastValues(last="pge", order_by="ts")}),
     r"prepare.aggregates\[0\].columns.last: \"the last 10 'pge'\": Spark cannot analyse it"),
])
def test_an_expression_spark_cannot_analyse_is_named_before_any_job(spark, visits, entry, message):
    spark.sparkContext.setJobGroup("aggregate-analysis", "analysis only")
    try:
        with pytest.raises(ConfigError, match=message):
            aggregates.analysed(spark, config_of(entry), {})
        assert spark.sparkContext.statusTracker().getJobIdsForGroup("aggregate-analysis") == []
    finally:
        spark.sparkContext.setJobGroup("", "")


def test_a_key_the_source_lacks_and_a_column_the_main_table_has_are_named(spark, visits):
    with pytest.raises(InputError, match="'pid'"):
        aggregates.analysed(spark, config_of(AggregateConfig(source="visits", key="pid", columns={"n": "count(1)"})),
                            {})
    with pytest.raises(InputError, match=r"prepare.aggregates\[0\].columns.age: the main table has a column 'age' "
                                         r"already \(from source 'people'\)"):
        aggregates.analysed(spark, config_of(visits_of({"age": "max(ts)"})), {"pid": "people", "age": "people"})


def executed_plans(spark, since: int) -> list[str]:
    """The physical plans of the SQL executions after execution id `since`, as Spark's status store keeps them."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    return [executions.apply(i).physicalPlanDescription() for i in range(executions.size())
            if executions.apply(i).executionId() > since]


def last_execution(spark) -> int:
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max([executions.apply(i).executionId() for i in range(executions.size())], default=-1)


def test_prepare_with_texts_lists_and_aggregates_runs_no_python_udf(spark, visits, tmp_path):
    spec = {"pid": {"kind": "key"}, "age": {"kind": "numeric"},
            "recent": {"kind": "list", "max_length": 3}, "queries": {"kind": "text", "min_count": 1},
            "y": {"kind": "label", "task": "regression"}}
    entry = visits_of({"recent": LastValues(last="page", order_by="ts", n=3),
                       "queries": "concat_ws(' ', collect_list(query))"})
    config = config_of(entry, spec=spec)
    rows = spark.createDataFrame([(i % 4 + 1, 20 + i, float(i)) for i in range(40)], "pid long, age int, y double")
    since = last_execution(spark)
    manifest = api.prepare(spark, config=config, tables={"people": rows}, output=str(tmp_path / "ds"),
                           log=lambda _: None)
    assert manifest.imputed["by_column"]["recent"] == 20  # pid 3 and 4: no rows before the cut-off
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    plans = executed_plans(spark, since)
    written = [p for p in plans if "InsertIntoHadoopFsRelationCommand" in p and "tfrecord" in p.lower()]
    assert written and all("collect_list" in p and "array_sort" in p for p in written), plans
    python = ("BatchEvalPython", "ArrowEvalPython", "PythonUDF")
    assert not [p for p in plans if any(node in p for node in python)]


def test_the_dataframe_way_a_lookup_of_aggregates_the_user_built(spark, visits, tmp_path):
    spec = {"pid": {"kind": "key"}, "age": {"kind": "numeric"}, "recent": {"kind": "list", "max_length": 3},
            "y": {"kind": "label", "task": "regression"}}
    recent = spark.table("agg_visits").where(CUT).groupBy("person").agg(
        aggregates.last_values(LastValues(last="page", order_by="ts", n=3)).alias("recent"))
    config = config_of(spec=spec)  # a lookup of a source only `tables` gives: checked when prepare has it
    config = dataclasses.replace(config, prepare=dataclasses.replace(config.prepare, lookups=(
        LookupConfig(source="recent", left_on="pid", right_on="person"),)))
    rows = spark.createDataFrame([(i % 4 + 1, 20 + i, float(i)) for i in range(40)], "pid long, age int, y double")
    manifest = api.prepare(spark, config=config, tables={"people": rows, "recent": recent},
                           output=str(tmp_path / "ds"), log=lambda _: None)
    assert manifest.imputed["by_column"]["recent"] == 20
    assert manifest.vocabulary_sizes["recent"] == 4  # /a /b /c /search


def test_the_dataframe_way_on_the_prepare_page_runs(spark, tmp_path):
    """The page's example as it is, its paths under a temporary directory and census's sources pointed there."""
    section = (ROOT / "docs" / "prepare.md").read_text().split("## Aggregates you write", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    raw = tmp_path / "demo-output" / "raw"
    synthetic.generate(spark, str(raw), 400, 5.0, 3, "2026-01-01")
    overrides = census_overrides(raw, tmp_path / "unused", 400)
    code = example.replace('config.load("conf/census.toml")', f"config.load({str(CENSUS)!r}, {overrides!r})") \
        .replace('"demo-output/', f'"{tmp_path}/demo-output/')
    namespace = {"spark": spark}
    exec(compile(code, "docs/prepare.md", "exec"), namespace)
    manifest = namespace["manifest"]
    assert list(manifest.sources) == ["people", "regions", "per_person", "events"]
    assert manifest.vocabulary_sizes["recent_pages"] == 21  # the embedded pages and /search
    assert manifest.vocabulary_sizes["queries"] > 10
    assert (tmp_path / "demo-output" / "dataset-own" / "_meta" / "manifest.json").exists()
