"""A text column as the model's token ids, made from Arrow buffers by the rule of `features.text` (its graph tokenizer is
most of a text model's work: here the ids cost a fraction of it).

ASCII texts are split over all their bytes at once in numpy: lowercased, a word is a run of letters and digits (in ASCII
exactly what `SEPARATORS` leaves). Other texts are lowercased by Python and split by Arrow's RE2 with `SEPARATORS`, as
the graph splits them. Then
the first `max_tokens` words of each row, their neighbours' pairs with `ngrams` = 2, and each token's vocabulary id as
the model's lookup gives it: 0 padding, 1 unseen (one out-of-vocabulary id), 2 + its line in the vocabulary."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfos_jobs.contracts import serving as contract
from tfos_jobs.features.kinds import TextFeature
from tfos_jobs.features.text import SEPARATORS
from udfs.arrow_inputs import count

FIRST_ID = 2  # the vocabulary's first id: after padding (0) and the one out-of-vocabulary id (1)

_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[ord("A"):ord("Z") + 1] += 32
_IN_WORD = np.zeros(256, dtype=bool)  # a byte of an ASCII word: a letter (either case) or a digit
_IN_WORD[ord("a"):ord("z") + 1] = _IN_WORD[ord("A"):ord("Z") + 1] = _IN_WORD[ord("0"):ord("9") + 1] = True


def takes_ids(f: TextFeature) -> bool:
    """Whether `text_ids` gives this feature's ids as the model's lookup does: with one out-of-vocabulary id (more are
    hashed by the lookup itself)."""
    return f.num_oov_buckets == 1


def text_ids(f: TextFeature, column: pa.Array, vocab: pa.Array, counts: dict[str, int]) -> np.ndarray:
    """[rows, f.width()] int64 token ids of a string column; nulls (the empty text), texts cut at `max_tokens` words and
    unseen tokens counted, as the graph counts them."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise TypeError(f"column {f.name!r} (text feature) has type {column.type}; pass a string")
    rows = len(column)
    count(counts, contract.count_key(contract.COUNT_NULL, f.name), column.null_count)
    words, per_row = _words(pc.fill_null(column, "").cast(pa.string()))
    count(counts, contract.count_key(contract.COUNT_TRUNCATED, f.name), int((per_row > f.max_tokens).sum()))
    row_of = np.repeat(np.arange(rows), per_row)
    position = np.arange(len(row_of)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    kept = position < f.max_tokens
    tokens, token_rows, columns = words.filter(pa.array(kept)), row_of[kept], position[kept]
    if f.ngrams == 2 and len(tokens) > 1:  # each row's pairs of neighbours follow its words
        same_row = token_rows[1:] == token_rows[:-1]
        pairs = pc.binary_join_element_wise(tokens.slice(0, len(tokens) - 1), tokens.slice(1), " ")
        pair_rows = token_rows[1:][same_row]
        pair_columns = np.minimum(per_row, f.max_tokens)[pair_rows] + columns[:-1][same_row]
        tokens = pa.concat_arrays([tokens, pairs.filter(pa.array(same_row))])
        token_rows, columns = np.concatenate([token_rows, pair_rows]), np.concatenate([columns, pair_columns])
    index = pc.index_in(tokens, value_set=vocab)
    count(counts, contract.count_key(contract.COUNT_UNSEEN, f.name), index.null_count)
    out = np.zeros((rows, f.width()), np.int64)
    out[token_rows, columns] = pc.fill_null(pc.add(index, FIRST_ID), 1).to_numpy(zero_copy_only=False)
    return out


def _words(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Every row's words one after another, and how many each row has."""
    ascii = np.asarray(pc.string_is_ascii(texts))
    if ascii.all():
        return _ascii_words(texts)
    rows = np.concatenate([np.flatnonzero(ascii), np.flatnonzero(~ascii)])
    a_words, a_counts = _ascii_words(texts.filter(pa.array(ascii)))
    r_words, r_counts = _regex_words(texts.filter(pa.array(~ascii)))
    per_row = np.concatenate([a_counts, r_counts])
    lists = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)),
                                     pa.concat_arrays([a_words, r_words]))
    ordered = lists.take(pa.array(np.argsort(rows)))
    return pc.list_flatten(ordered), pc.list_value_length(ordered).to_numpy(zero_copy_only=False)


def _ascii_words(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    texts = pa.concat_arrays([texts])  # no offset: the buffers start at the first row
    offsets = np.frombuffer(texts.buffers()[1], np.int32)[:len(texts) + 1]
    data = texts.buffers()[2]
    raw = np.frombuffer(data, np.uint8)[:offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    word = _IN_WORD[raw]
    before, after = np.concatenate([[False], word[:-1]]), np.concatenate([word[1:], [False]])
    inside = offsets[1:-1]
    inside = inside[(inside > 0) & (inside < len(word))]
    before[inside] = False  # a row's first byte starts a word, whatever the row before ends with
    after[inside - 1] = False  # ... and its last byte ends one
    starts, ends = np.flatnonzero(word & ~before), np.flatnonzero(word & ~after) + 1
    lengths = ends - starts
    word_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.StringArray.from_buffers(len(starts), pa.py_buffer(word_offsets), pa.py_buffer(_LOWER[raw[word]]))
    per_row = np.bincount(np.searchsorted(offsets, starts, side="right") - 1, minlength=len(texts))
    return values, per_row


def _regex_words(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    # Lowercased by Python: Unicode's full mapping with its special cases, as TensorFlow's and Java's lower have it
    # ("İ" is "i̇", a final "Σ" is "ς"); Arrow's utf8_lower maps one code point to one.
    lowered = pa.array([text.lower() for text in texts.to_pylist()], pa.string())
    pieces = pc.split_pattern_regex(lowered, SEPARATORS)
    flat = pc.list_flatten(pieces)
    kept = np.asarray(pc.not_equal(flat, ""))
    rows = np.repeat(np.arange(len(texts)), pc.list_value_length(pieces).to_numpy(zero_copy_only=False))[kept]
    return flat.filter(pa.array(kept)), np.bincount(rows, minlength=len(texts))
