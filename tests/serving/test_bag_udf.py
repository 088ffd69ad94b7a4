"""Texts, lists and vectors through the prediction function: the same probabilities as the
SavedModel called in process on the inputs prepared the way prepare stores them, their nulls,
cut texts and lists and unseen tokens and elements counted, a wrong type refused at analysis."""
from __future__ import annotations

import numpy as np
import pytest
from pyspark.errors import AnalysisException

import udfs
from tfos_jobs.features.text import PAD

ROWS = [  # id, review, tags, item_vec, shop, price
    (1, "Great box, arrived fast", ["gift", "sale"], [0.5, -1.0], "a", 3.0),
    (2, None, None, None, None, None),
    (3, "one two three four five six seven eight", ["sale", None, "", "new", "gift", "zzz"], [2.0, 0.0], "b", 12.0),
    (4, "ÇAFÉ déjà-vu!!! unheard", [], [0.0, 0.0], "c", 7.5),
    (5, "", ["mystery", "gift"], [1.5, 1.5], "a", 19.0),
]


def as_stored(rows) -> dict[str, np.ndarray]:
    """The rows as the model takes them: nulls filled, list elements kept and cut as prepare keeps them."""
    tags = [[t for t in (r[2] or []) if t][:3] for r in rows]
    return {"review": np.array([r[1] or "" for r in rows], dtype=object),
            "tags": np.array([(t + [PAD] * 3)[:3] for t in tags], dtype=object),
            "item_vec": np.array([r[3] or [0.0, 0.0] for r in rows], np.float32),
            "shop": np.array([r[4] or "__missing__" for r in rows], dtype=object),
            "price": np.array([0.0 if r[5] is None else r[5] for r in rows], np.float32)}  # price's default


def test_texts_lists_and_vectors_score_as_in_process_and_are_counted(spark, bag_model):
    import tensorflow as tf

    df = spark.createDataFrame(ROWS, "id int, review string, tags array<string>, item_vec array<double>, "
                                     "shop string, price double")
    p = udfs.register(spark, "predict_bags", str(bag_model))
    got = {r.id: r.p.probability for r in df.select("id", p().alias("p")).collect()}
    serve = tf.saved_model.load(str(bag_model / "saved_model")).signatures["serving_default"]
    expected = serve(**{k: tf.constant(v) for k, v in as_stored(ROWS).items()})["probability"].numpy()
    np.testing.assert_allclose([got[r[0]] for r in ROWS], expected, atol=1e-6)
    counts = p.counts()
    assert counts["rows"] == len(ROWS)
    assert (counts["null:review"], counts["null:tags"], counts["null:item_vec"], counts["null:shop"]) == (1, 3, 1, 1)
    assert counts["truncated:review"] == 1  # eight words, six kept
    assert counts["truncated:tags"] == 1  # four elements left of six, three kept
    # Every token the kept words make, words and pairs; those outside the vocabulary are unseen.
    tokens = {1: ["great", "box", "arrived", "fast", "great box", "box arrived", "arrived fast"],
              3: ["one", "two", "three", "four", "five", "six", "one two", "two three", "three four", "four five",
                  "five six"],
              4: ["çafé", "déjà", "vu", "unheard", "çafé déjà", "déjà vu", "vu unheard"]}
    vocab = set((bag_model / "saved_model" / "assets" / "vocab" / "review.txt").read_text().split("\n"))
    assert counts["unseen:review"] == sum(t not in vocab for words in tokens.values() for t in words)
    assert counts["unseen:tags"] == 1  # "mystery"; "zzz" was cut


def test_a_list_given_as_a_string_is_refused_at_analysis(spark, bag_model):
    df = spark.createDataFrame([(r[1], ",".join(t or "" for t in r[2] or []), r[3], r[4], r[5]) for r in ROWS],
                               "review string, tags string, item_vec array<double>, shop string, price double")
    p = udfs.register(spark, "predict_bags_typed", str(bag_model))
    with pytest.raises(AnalysisException, match=r"'tags'\) \(list feature\) has type string, expected one of: "
                                                 r"array<string>, array<byte>"):
        df.select(p("review", "tags", "item_vec", "shop", "price")).collect()


@pytest.mark.parametrize("column, given, expected", [
    ("review", "array('great', 'box')", r"'review'\) \(text feature\) has type array<string>, expected one of: string"),
    ("item_vec", "'0.5,-1.0'", r"'item_vec'\) \(vector feature\) has type string, expected one of: array<byte>, "
                               r"array<short>, array<integer>, array<long>, array<float>, array<double>, array<decimal>"),
])
def test_a_text_or_a_vector_of_the_wrong_type_is_refused_at_analysis_naming_the_types_it_takes(
        spark, bag_model, column, given, expected):
    udfs.register(spark, "predict_bags_checked", str(bag_model))
    args = {"review": "'great box'", "tags": "array('gift')", "item_vec": "array(0.5D, -1.0D)", "shop": "'a'",
            "price": "3.0D", column: given}
    with pytest.raises(AnalysisException, match=expected):
        spark.sql(f"SELECT predict_bags_checked({', '.join(args.values())})").collect()
