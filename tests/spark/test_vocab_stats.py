import numpy as np
import pytest
from pyspark.sql import functions as F

from tfos_jobs.errors import InputError
from tfos_jobs.features import stats, vocab
from tfos_jobs.features.spec import CategoricalFeature


@pytest.fixture(scope="module")
def colours(spark):
    values = ["red"] * 5 + ["blue"] * 3 + ["green"] * 3 + ["amber"] * 3 + ["pink"] * 1 + [None] * 2
    shapes = ["sq"] * 4 + ["tri"] * 4 + ["hex"] * 9
    return spark.createDataFrame(list(zip(values, shapes)), "colour string, shape string")


def test_order_is_count_desc_then_value_asc(colours):
    got = vocab.compute(colours, [CategoricalFeature("colour"), CategoricalFeature("shape")])
    assert got["colour"] == [("red", 5), ("amber", 3), ("blue", 3), ("green", 3), ("pink", 1)]
    assert got["shape"] == [("hex", 9), ("sq", 4), ("tri", 4)]


def test_top_k_and_min_count(colours):
    got = vocab.compute(colours, [
        CategoricalFeature("colour", top_k=3), CategoricalFeature("shape", min_count=5),
    ])
    assert got["colour"] == [("red", 5), ("amber", 3), ("blue", 3)]
    assert got["shape"] == [("hex", 9)]
    only_frequent = vocab.compute(colours, [CategoricalFeature("colour", min_count=3, top_k=10)])
    assert [v for v, _ in only_frequent["colour"]] == ["red", "amber", "blue", "green"]


def test_integer_categories_become_strings(spark):
    df = spark.createDataFrame([(3,), (3,), (10,)], "level int")
    assert vocab.compute(df, [CategoricalFeature("level")])["level"] == [("3", 2), ("10", 1)]


def test_values_with_line_breaks_are_refused(spark):
    df = spark.createDataFrame([("a\nb",)], "c string")
    with pytest.raises(InputError, match="column 'c'"):
        vocab.compute(df, [CategoricalFeature("c")])


def test_numeric_statistics_match_numpy(spark):
    rng = np.random.default_rng(0)
    x = rng.normal(10, 3, 500)
    rows = [(float(v), i % 4 != 0) for i, v in enumerate(x)] + [(None, True), (float("nan"), True)]
    df = spark.createDataFrame(rows, "x double, keep boolean")
    row = df.agg(*stats.numeric_aggs(["x"], F.col("keep"))).first()
    got = stats.numeric_from_row(row, ["x"])["x"]
    kept = np.array([v for i, v in enumerate(x) if i % 4 != 0])
    assert got["count"] == len(kept)
    assert got["mean"] == pytest.approx(kept.mean(), rel=1e-12)
    assert got["std"] == pytest.approx(kept.std(), rel=1e-9)
    assert got["min"] == pytest.approx(kept.min(), rel=1e-11)  # stats keep 12 significant digits
    assert got["max"] == pytest.approx(kept.max(), rel=1e-11)
    missing = df.agg(*stats.missing_aggs(["x"], ["x"], F.lit(True))).first()
    assert missing["x__missing"] == 2
