"""Spark (prepare) and the model's graph (training, serving) make the same tokens of a text:
the word vocabulary prepare computes is the one the SavedModel looks its tokens up in."""
from __future__ import annotations

import pytest

from tfos_jobs.features.kinds import TextFeature
from tfos_jobs.features.text import PAD, graph_tokens, spark_tokens

TEXTS = [
    "Hello, World!", "  Ünïcödé  ÇAFÉ déjà-vu ", "ΣΊΣΥΦΟΣ ΟΔΟΣ", "İstanbul ǅemal", "straße STRASSE",
    "tab\tnew\nline\r\nend", "emoji 😀 ok", "数字１２３ ٣٤ abc_def", "n't x's", "a\u0301b", "", "   ", None,
    "don’t—stop…now", "ﬁne ＡＢＣ", "ⅷ ⑤ ²", "non\u00a0breaking\u2003em\u3000ideographic", "one", "a b c d e f g h",
]


@pytest.mark.parametrize("max_tokens, ngrams", [(64, 1), (3, 1), (4, 2), (1, 2)])
def test_spark_and_the_graph_make_the_same_tokens(spark, max_tokens, ngrams):
    import tensorflow as tf

    f = TextFeature("t", max_tokens=max_tokens, ngrams=ngrams)
    df = spark.createDataFrame([(i, t) for i, t in enumerate(TEXTS)], "i int, t string")
    by_spark = [r.k for r in df.orderBy("i").select(spark_tokens(df.t, f).alias("k")).collect()]
    padded = graph_tokens(tf.constant([t or "" for t in TEXTS]), f).numpy()
    assert padded.shape == (len(TEXTS), f.width())
    by_graph = [[w.decode() for w in row if w.decode() != PAD] for row in padded]
    assert by_graph == by_spark
    if (max_tokens, ngrams) == (64, 1):
        assert by_spark[:3] == [["hello", "world"], ["ünïcödé", "çafé", "déjà", "vu"], ["σίσυφος", "οδος"]]
        assert by_spark[TEXTS.index("emoji 😀 ok")] == ["emoji", "ok"]
        assert by_spark[TEXTS.index(None)] == by_spark[TEXTS.index("   ")] == []
    if (max_tokens, ngrams) == (4, 2):
        assert by_spark[TEXTS.index("a b c d e f g h")] == ["a", "b", "c", "d", "a b", "b c", "c d"]
        assert by_spark[TEXTS.index("one")] == ["one"]
