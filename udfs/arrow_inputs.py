"""The prediction function's Arrow columns as the model's inputs, by the rules of preparation: nulls filled with the
spec's defaults, values cut where prepare cuts them, and what was filled, cut or unseen counted (`contracts.serving`
counters). Each returns numpy arrays, straight from Arrow buffers where it can."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfos_jobs.contracts import serving as contract
from tfos_jobs.features.spec import ListFeature, VectorFeature
from tfos_jobs.features.text import PAD


def distinct_strings(name: str, column: pa.Array, default: str) -> tuple[pa.Array, np.ndarray]:
    """(the column's distinct values as strings, each row's index into them), nulls replaced
    by `default`. Categories repeat, so everything after this works on a few distinct values."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
    elif not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        if pa.types.is_integer(kind):
            column = column.cast(pa.string())
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            raise TypeError(f"column {name!r} (categorical feature) got binary values; pass a string")
        else:  # as Python spells them (3.0 -> "3.0"), the way a category from any other type reads
            column = pa.array([None if v is None else str(v) for v in column.to_pylist()], pa.string())
    encoded = column.dictionary_encode()  # a null row gets a null index
    values, indices = encoded.dictionary, encoded.indices
    if not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    if indices.null_count:  # the default joins the distinct values, not every null row: no copy of the strings
        values = pa.concat_arrays([values, pa.array([default], pa.string())])
        indices = pc.fill_null(indices, len(values) - 1)
    return values, indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)


def rows_of(flagged: np.ndarray, codes: np.ndarray) -> int:
    """How many rows hold one of the flagged distinct values: most batches have none, and then no row is looked at."""
    return int(flagged[codes].sum()) if flagged.any() else 0


def numbers(name: str, column: pa.Array) -> np.ndarray:
    """float64 numbers, NaN where the column is null or NaN."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
        example = next(v for v in column.to_pylist() if v is not None)
        raise TypeError(f"column {name!r} (numeric feature) got text values such as {example!r}; pass a number")
    try:
        numbers = column.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise TypeError(f"column {name!r} (numeric feature) has type {kind}; pass a number") from None
    return numbers.to_numpy(zero_copy_only=False)


def windows(name: str, column: pa.Array, steps: int) -> np.ndarray:
    """A column of lists (one window of one sensor per row) as a [rows, steps] float32 matrix.
    Windows come filled from the `windows` view; a null, a short window or a NaN is an error."""
    rows = len(column)
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)):
        raise TypeError(f"column {name!r} (sequence feature) has type {column.type}; pass an array of numbers")
    lengths = pc.fill_null(pc.list_value_length(column), -1).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(lengths != steps)
    if len(bad):
        i = int(bad[0])
        got = "a null" if lengths[i] < 0 else f"{lengths[i]} values"
        raise ValueError(f"column {name!r} (sequence feature): the model takes windows of {steps} values, "
                         f"row {i} of a batch has {got}")
    values = column.flatten().cast(pa.float32()).to_numpy(zero_copy_only=False)  # nulls become NaN
    if np.isnan(values).any():
        raise ValueError(f"column {name!r} (sequence feature): a window holds null values; fill them first "
                         "(the `windows` view of tfos sql has them filled as in training)")
    return values.reshape(rows, steps)


def texts(name: str, column: pa.Array, counts: dict[str, int]) -> np.ndarray:
    """A string column's values, a null as the empty text (counted); the graph tokenizes them."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise TypeError(f"column {name!r} (text feature) has type {column.type}; pass a string")
    count(counts, contract.count_key(contract.COUNT_NULL, name), column.null_count)
    return np.asarray(pc.fill_null(column, "").to_numpy(zero_copy_only=False), dtype=object)


def elements(f: ListFeature, column: pa.Array, vocab: pa.Array, width: int, counts: dict[str, int]) -> np.ndarray:
    """A list column as [rows, width] strings, as prepare stores lists: a null list empty, null and empty elements left
    out (both counted), integers as text, each list cut to max_length (counted), PAD after; unseen elements counted."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        raise TypeError(f"column {f.name!r} (list feature) has type {column.type}; pass an array of strings or integers")
    rows = len(column)
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(column)
    if not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    kept = np.asarray(pc.fill_null(pc.not_equal(values, ""), False))
    count(counts, contract.count_key(contract.COUNT_NULL, f.name), column.null_count + int((~kept).sum()))
    row_of = np.repeat(np.arange(rows), lengths)[kept]
    values = values.filter(pa.array(kept))
    per_row = np.bincount(row_of, minlength=rows)
    position = np.arange(len(row_of)) - (np.cumsum(per_row) - per_row)[row_of]
    count(counts, contract.count_key(contract.COUNT_TRUNCATED, f.name), int((per_row > f.max_length).sum()))
    inside = position < f.max_length
    values = values.filter(pa.array(inside))
    count(counts, contract.count_key(contract.COUNT_UNSEEN, f.name),
           int((~np.asarray(pc.is_in(values, value_set=vocab))).sum()))
    out = np.full((rows, width), PAD, dtype=object)
    out[row_of[inside], position[inside]] = values.to_numpy(zero_copy_only=False)
    return out


def vectors(f: VectorFeature, column: pa.Array, width: int, counts: dict[str, int]) -> np.ndarray:
    """A column of arrays of numbers as [rows, width] float32, a null vector zeros (counted); a vector of another
    length than `dim`, or holding a null, is an error (never padded or filled)."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)):
        raise TypeError(f"column {f.name!r} (vector feature) has type {column.type}; pass an array of numbers")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    nulls = np.isnan(lengths) if lengths.dtype.kind == "f" else np.zeros(len(column), bool)
    bad = np.flatnonzero(~nulls & (np.nan_to_num(lengths, nan=f.dim) != f.dim))
    if len(bad):
        raise ValueError(f"column {f.name!r} (vector feature): the model takes vectors of {f.dim} values, row "
                         f"{int(bad[0])} of a batch has {int(lengths[bad[0]])}")
    values = pc.list_flatten(column).cast(pa.float32()).to_numpy(zero_copy_only=False).reshape(-1, f.dim)
    holes = np.flatnonzero(np.isnan(values).any(axis=1))
    if len(holes):
        raise ValueError(f"column {f.name!r} (vector feature): row {int(np.flatnonzero(~nulls)[holes[0]])} of a batch "
                         "holds a null value (prepare sets such rows aside with the rejects)")
    count(counts, contract.count_key(contract.COUNT_NULL, f.name), int(nulls.sum()))
    out = np.zeros((len(column), width), np.float32)
    out[~nulls, :f.dim] = values  # a null vector: zeros
    return out


def count(counts: dict[str, int], key: str, n: int) -> None:
    if n:
        counts[key] = counts.get(key, 0) + n
