"""How text becomes tokens, one rule written twice: as Spark SQL for prepare (the word vocabulary,
the texts cut at `max_tokens`, counted) and as TensorFlow ops for the model's graph (training and
serving, so a SavedModel takes the raw string). A test feeds both the same texts and requires
the same tokens; they agree because each step has one meaning in both engines:

1. lowercase by Unicode's rules (Java's `toLowerCase` in Spark; `tf.strings.lower` told
   `encoding="utf-8"`, which is otherwise ASCII-only);
2. everything that is not a letter, a digit or a combining mark separates words (`SEPARATORS`,
   read alike by Java's regex and RE2), so punctuation, symbols, emoji and every kind of
   whitespace split and vanish;
3. the first `max_tokens` words are kept; with `ngrams` = 2 each pair of neighbours follows them,
   joined by one space.

A list's elements are its tokens as they are (`spark_elements`): never split, only left out when null or empty."""
from __future__ import annotations

from typing import Any

from tfos_jobs.features.kinds import TextFeature

SEPARATORS = r"[^\p{L}\p{N}\p{M}]+"
PAD = ""  # no token: what pads a row's ids to the model's width (never a token itself)


def spark_words(column: Any) -> Any:
    """A string Column's words, an array<string> Column (empty for a null or empty text)."""
    from pyspark.sql import functions as F

    return F.filter(F.split(F.lower(F.coalesce(column, F.lit(""))), SEPARATORS), lambda w: w != PAD)


def spark_elements(column: Any, max_length: int | None = None) -> Any:
    """A list Column's elements as the records hold them, array<string>: integers as text, null and
    empty elements left out (an empty one would read as `PAD`), a null list empty, then the first
    `max_length` kept (all without it)."""
    from pyspark.sql import functions as F

    elements = F.coalesce(column.cast("array<string>"), F.array().cast("array<string>"))
    kept = F.filter(elements, lambda e: e.isNotNull() & (e != PAD))
    return kept if max_length is None else F.slice(kept, 1, max_length)


def spark_tokens(column: Any, f: TextFeature) -> Any:
    """The tokens the model's graph makes of a string Column (`graph_tokens`), as array<string>."""
    from pyspark.sql import functions as F

    words = F.slice(spark_words(column), 1, f.max_tokens)
    if f.ngrams == 1:
        return words
    pairs = F.zip_with(words, F.slice(words, 2, f.max_tokens), lambda a, b: F.concat_ws(" ", a, b))
    return F.concat(words, F.slice(pairs, 1, F.greatest(F.size(words) - 1, F.lit(0))))


def graph_words(texts: Any) -> Any:
    """A [rows] string tensor's words, ragged [rows, None]."""
    import tensorflow as tf

    lowered = tf.strings.lower(texts, encoding="utf-8")
    return tf.strings.split(tf.strings.regex_replace(lowered, SEPARATORS, " "))  # no separator: runs of spaces, none empty


def graph_tokens(texts: Any, f: TextFeature) -> Any:
    """[rows, f.width()] string tensor: each row's tokens (as `spark_tokens`), then `PAD`."""
    return tokens_of_words(graph_words(texts), f)


def tokens_of_words(words: Any, f: TextFeature) -> Any:
    """`graph_tokens` of texts whose words are made (ragged [rows, None], as `graph_words` or `spark_words` make them):
    the first `max_tokens`, their pairs with `ngrams` = 2, then `PAD`."""
    import tensorflow as tf

    words = words[:, :f.max_tokens]
    tokens = words if f.ngrams == 1 else tf.concat([words, tf.strings.ngrams(words, 2, separator=" ")], axis=1)
    return tokens.to_tensor(default_value=PAD, shape=[None, f.width()])
