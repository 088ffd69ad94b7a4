"""The prediction function's token ids, made from Arrow buffers, are the ids the model's own tokenizer and lookup give
the same texts: ASCII and not, punctuation, whitespace, nulls, cuts at max_tokens, pairs of words; and counted alike."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from tfos_jobs.features.kinds import TextFeature
from tfos_jobs.features.text import PAD, graph_tokens, graph_words
from udfs.text_ids import text_ids

TEXTS = ["Great box, arrived fast", None, "one  two\tthree!!", "ÇAFÉ déjà-vu!!! unheard", "", "--x--", "A",
         "naïve—café «ok» 😀emoji🙂x", "UPPER lower 123abc great box", "ab", "cd", "w1 w2 w3 w4 w5 w6", "ǅemal İstanbul",
         "ΣΊΣΥΦΟΣ ΟΔΟΣ", "straße STRASSE"]
VOCAB = ["great", "box", "x", "great box", "upper lower", "café", "déjà", "w5", "ab", "istanbul"]


@pytest.mark.parametrize("ngrams, max_tokens", [(1, 4), (2, 4), (2, 64), (1, 1)])
def test_ids_and_counts_are_the_graphs(ngrams, max_tokens):
    f = TextFeature("review", max_tokens=max_tokens, ngrams=ngrams)
    counts: dict[str, int] = {}
    column = pa.array(["padding row", *TEXTS], pa.string()).slice(1)  # an offset into the buffers, as batches have
    got = text_ids(f, column, pa.array(VOCAB), counts)
    texts = tf.constant([t or "" for t in TEXTS])
    lookup = tf.keras.layers.StringLookup(vocabulary=VOCAB, mask_token=PAD, num_oov_indices=1)
    expected = lookup(graph_tokens(texts, f)).numpy()
    np.testing.assert_array_equal(got, expected)
    cut = int((graph_words(texts).row_lengths() > max_tokens).numpy().sum())
    assert counts == {"null:review": 1, "unseen:review": int((expected == 1).sum()),
                      **({"truncated:review": cut} if cut else {})}
