"""Lookup joins, split and rejects against hand-computed expectations (aggregates: test_aggregates.py)."""
import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs.config import SplitConfig
from tfos_jobs.data import split as split_mod
from tfos_jobs.data import transforms
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import (CategoricalFeature, FeatureSpec, KeyFeature, Label, ListFeature, NumericFeature,
                                     TextFeature, VectorFeature)


def test_lookup_column_clash_and_duplicate_keys(spark):
    people = spark.createDataFrame([(1, "US", "x")], "pid long, country string, region string")
    regions = spark.createDataFrame([("US", "NA"), ("US", "N. America"), ("DE", "EU")], "code string, region string")
    with pytest.raises(InputError, match="source 'regions' would add columns that already exist: region"):
        transforms.join_lookup(people, regions, "country", "code", "regions")
    assert transforms.duplicate_keys(regions, "code") == ["US"]


def test_hash_split_is_deterministic_and_close_to_the_ratio(spark):
    df = spark.range(0, 20_000).withColumnRenamed("id", "key")
    split = split_mod.assign(SplitConfig(eval_fraction=0.2), "key")
    first = df.select("key", split.alias("s"))
    second = spark.range(0, 20_000).withColumnRenamed("id", "key").repartition(7).select("key", split.alias("s"))
    assertDataFrameEqual(first, second)
    share = first.where("s = 'eval'").count() / 20_000
    assert 0.19 < share < 0.21
    salted = df.select("key", split_mod.assign(SplitConfig(eval_fraction=0.2, salt="b"), "key").alias("s"))
    changed = first.join(salted.withColumnRenamed("s", "t"), "key").where("s != t").count()
    assert changed > 1000  # a new salt draws a new split


def test_a_split_left_empty_by_the_hash_takes_the_key_nearest_the_boundary(spark):
    keys = spark.createDataFrame([(f"k{i}",) for i in range(40)], "key string")
    split = SplitConfig(eval_fraction=0.2)
    buckets = keys.select("key", split_mod.bucket(split, "key").alias("b")).toPandas().sort_values("b")
    above = buckets[buckets["b"] >= split_mod.nominal_boundary(split)]
    train_only = keys.where(keys["key"].isin(above["key"].head(5).tolist()))
    boundary, note = split_mod.settle(train_only, split, "key", {"train": 5, "eval": 0})
    assert boundary == int(above["b"].iloc[0]) + 1
    assert note == "eval_fraction = 0.2 put all 5 values of 'key' in train; the one with the lowest hash went to eval"
    got = train_only.select("key", split_mod.assign(split, "key", boundary).alias("s"))
    assert sorted(r["key"] for r in got.where("s = 'eval'").collect()) == [above["key"].iloc[0]]

    everything_eval = SplitConfig(eval_fraction=0.9)
    below = buckets[buckets["b"] < split_mod.nominal_boundary(everything_eval)]
    eval_only = keys.where(keys["key"].isin(below["key"].head(4).tolist()))
    boundary, note = split_mod.settle(eval_only, everything_eval, "key", {"train": 0, "eval": 4})
    assert note.endswith("the one with the highest hash went to train")
    got = eval_only.select("key", split_mod.assign(everything_eval, "key", boundary).alias("s"))
    assert sorted(r["key"] for r in got.where("s = 'train'").collect()) == [below["key"].head(4).iloc[-1]]

    # both splits held keys: the nominal boundary stands
    assert split_mod.settle(keys, split, "key", {"train": 32, "eval": 8}) == (split_mod.nominal_boundary(split), None)
    with pytest.raises(InputError, match=r"eval_fraction = 0.2: the usable data holds 1 value\(s\) of the key 'key'"):
        split_mod.settle(keys.limit(1), split, "key", {"train": 1, "eval": 0})
    with pytest.raises(InputError, match=r"prepare.split.column 'part': no usable row is 'eval' \(9 train, 0 eval\)"):
        split_mod.settle(keys, SplitConfig(mode="column", column="part"), None, {"train": 9, "eval": 0})


def test_column_split_and_reject_reasons(spark):
    spec = FeatureSpec((
        KeyFeature("pid"), NumericFeature("age"), CategoricalFeature("job"),
        Label("income", positive=(">50K",), negative=("<=50K",)),
    )).check()
    split = SplitConfig(mode="column", column="part")
    df = spark.createDataFrame(
        [(1, 30, "a", ">50K", "train"), (2, 30, "a", "<=50K", "EVAL"), (None, 30, "a", ">50K", "train"),
         (4, 30, "a", None, "train"), (5, 30, "a", "50K+", "train"), (6, 30, "a", ">50K", "test"),
         (7, 30, "a", ">50K", "holdout")],
        "pid long, age int, job string, income string, part string",
    )
    got = df.select("pid", split_mod.assign(split, "pid").alias("split"),
                    transforms.reject_reason(spec, split, df.columns).alias("reason"))
    expected = spark.createDataFrame([
        (1, "train", None), (2, "eval", None), (None, "train", "key 'pid' is null"),
        (4, "train", "label 'income' is null"), (5, "train", "label 'income' is not one of ['>50K', '<=50K']"),
        (6, "test", None), (7, None, "split column 'part' is not one of 'train', 'eval', 'test'"),
    ], "pid long, split string, reason string")
    assertDataFrameEqual(got, expected)


def test_eval_drawn_from_the_rows_the_column_calls_train(spark):
    rows = [(i, "train") for i in range(200)] + [(1000 + i, "test") for i in range(20)] + [(2000, "eval")]
    df = spark.createDataFrame(rows, "pid long, part string")
    split = SplitConfig(mode="column", column="part", eval_from_train=True, eval_fraction=0.25)
    got = {(r["part"], r["split"]): r["count"] for r in
           df.select("part", split_mod.assign(split, "pid").alias("split")).groupBy("part", "split").count().collect()}
    assert got[("test", "test")] == 20 and got[("eval", "eval")] == 1  # what the column names stays
    assert got[("train", "train")] + got[("train", "eval")] == 200
    assert 30 <= got[("train", "eval")] <= 70  # a quarter of the train rows, by hash
    same_keys = df.where("part = 'train'").select("pid", split_mod.assign(split, "pid").alias("split"))
    hashed = SplitConfig(mode="hash", eval_fraction=0.25)
    assertDataFrameEqual(same_keys, df.where("part = 'train'").select("pid", split_mod.assign(hashed, "pid").alias("split")))


def test_impute_and_record_columns(spark):
    spec = FeatureSpec((
        KeyFeature("pid"), NumericFeature("age", default=35.0), CategoricalFeature("job", default="?"),
        Label("income", positive=(">50K",), negative=("<=50K",)),
    )).check()
    df = spark.createDataFrame(
        [(1, None, "a", ">50K"), (2, float("nan"), None, "<=50K"), (3, 41.5, "b", "<=50K")],
        "pid long, age double, job string, income string",
    )
    got = transforms.impute(df, spec, {"age": 35.0}).select(*transforms.record_columns(spec))
    expected = spark.createDataFrame(
        [(1, 35.0, "a", 1), (2, 35.0, "?", 0), (3, 41.5, "b", 0)],
        "pid long, age float, job string, income long",
    )
    assertDataFrameEqual(got, expected)


def test_texts_lists_and_vectors_are_imputed_cleaned_and_cut_for_the_records(spark):
    spec = FeatureSpec((
        KeyFeature("pid"), TextFeature("t", max_tokens=2), ListFeature("l", max_length=2), ListFeature("n", max_length=3),
        VectorFeature("v", dim=2), Label("y"),
    )).check()
    df = spark.createDataFrame([
        (1, "A long, long text", ["x", None, "", "y", "z"], [1, None, 2], [1.5, 2.0], 1),
        (2, None, None, None, None, 0),
    ], "pid long, t string, l array<string>, n array<int>, v array<double>, y int")
    got = transforms.impute(df, spec, {}).select(*transforms.record_columns(spec))
    expected = spark.createDataFrame([
        (1, "A long, long text", ["x", "y"], ["1", "2"], [1.5, 2.0], 1),  # the text whole: the model tokenizes it
        (2, "", [], [], [0.0, 0.0], 0),
    ], "pid long, t string, l array<string>, n array<string>, v array<float>, y long")
    assertDataFrameEqual(got, expected)


def test_a_vector_of_another_length_is_rejected_naming_its_length(spark):
    spec = FeatureSpec((VectorFeature("v", dim=3), Label("y"))).check()
    df = spark.createDataFrame([(1, [1.0, 2.0, 3.0], 1), (2, [1.0], 1), (3, None, 0), (4, [1.0, None, 2.0], 0)],
                               "i int, v array<double>, y int")
    got = df.select("i", transforms.reject_reason(spec, SplitConfig(), df.columns).alias("reason"))
    expected = spark.createDataFrame([(1, None), (2, "vector 'v' has 1 values, not its dim 3"), (3, None),
                                      (4, "vector 'v' holds a null")], "i int, reason string")
    assertDataFrameEqual(got, expected)


def test_multiclass_label_is_encoded_by_class_order(spark):
    label = Label("kind", task="multiclass")
    df = spark.createDataFrame([("cat",), ("dog",), ("bird",)], "kind string")
    got = df.select(transforms.encode_label(label, ("dog", "cat", "bird")).alias("y"))
    assert [r.y for r in got.collect()] == [1, 0, 2]
