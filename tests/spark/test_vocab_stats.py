import numpy as np
import pytest
from pyspark.sql import functions as F

from tfos_jobs.errors import InputError
from tfos_jobs.features import stats, vocab
from tfos_jobs.features.spec import CategoricalFeature, ListFeature, TextFeature


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


def test_a_text_adds_its_tokens_and_a_list_its_elements(spark):
    df = spark.createDataFrame([
        ("Red car, red CAR!", ["b", None, "", "a", "c"], [7, 7]), ("the car", ["a"], None), (None, None, [8]),
    ], "t string, l array<string>, n array<bigint>")
    got = vocab.compute(df, [TextFeature("t", max_tokens=3, ngrams=2, min_count=1), ListFeature("l", max_length=2),
                             ListFeature("n")])
    # the first 3 words (red car red: the last CAR is cut) and their pairs; the elements but null and empty ones, at
    # most max_length
    assert got == {"t": [("car", 2), ("red", 2), ("car red", 1), ("red car", 1), ("the", 1), ("the car", 1)],
                   "l": [("a", 2), ("b", 1)], "n": [("7", 2), ("8", 1)]}


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


def test_quantile_bins_match_numpy_and_merge_repeated_edges(spark):
    rng = np.random.default_rng(1)
    x = rng.normal(10, 3, 2000)
    gain = np.where(np.arange(2000) % 20 < 3, rng.uniform(1000, 5000, 2000), 0.0)  # 85% zeros
    rows = [(float(a), float(g)) for a, g in zip(x, gain)] + [(None, None), (float("nan"), 0.0)]
    got = stats.quantile_bins(spark.createDataFrame(rows, "x double, gain double"), {"x": 8, "gain": 10})
    expected = np.quantile(x, np.linspace(0, 1, 9))
    assert len(got["x"]) == 9 and got["x"] == sorted(got["x"])
    np.testing.assert_allclose(got["x"], expected, atol=0.02 * 3)  # approxQuantile: within 0.1% of the rank
    assert got["x"][0] == pytest.approx(x.min()) and got["x"][-1] == pytest.approx(x.max())
    # ten edges, the first nine at 0 (85% of the rows): merged into one bin, then the non-zero ones
    assert got["gain"][0] == 0.0 and len(got["gain"]) == 3 and got["gain"][1] > 1000
    assert got["gain"][2] == pytest.approx(gain.max(), rel=1e-6)
    constant = stats.quantile_bins(spark.createDataFrame([(4.0,), (4.0,)], "c double"), {"c": 4})
    assert constant == {"c": [4.0, 5.0]}
    with pytest.raises(ValueError, match="features.c: every train value is missing"):
        stats.quantile_bins(spark.createDataFrame([(None,)], "c double"), {"c": 4})
