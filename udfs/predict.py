"""Executor side of the prediction UDF: a SavedModel loaded once per Python worker, called on Arrow batches through its
concrete `serving_default` function (not `model.predict`).

The UDF is Arrow-native: columns arrive as `pyarrow` arrays and the results leave as arrays, with no pandas in between.
Inputs are the raw feature columns, in spec order or as one struct. Serving applies the same rules as preparation: a
null takes the spec's default, a category outside the vocabulary goes to the model's out-of-vocabulary buckets; both are
counted."""
from __future__ import annotations

import gc
import os
import sys
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfos_jobs.contracts import serving as contract
from tfos_jobs.features.spec import (CategoricalFeature, FeatureSpec, ListFeature, NumericFeature, SequenceFeature,
                                     TextFeature, VectorFeature)
from tfos_jobs.features.text import PAD
from tfos_jobs.tf_import import tensorflow

if TYPE_CHECKING:
    from udfs.shipping import ShippedModel

CAPACITY = 3  # models kept per Python worker
_models: "OrderedDict[str, Scorer]" = OrderedDict()
_lock = threading.Lock()


def use_task_gpus() -> None:
    """Before TensorFlow loads: see only the GPUs Spark gave this task, or none at all."""
    if "tensorflow" in sys.modules:
        return
    from pyspark import TaskContext

    ctx = TaskContext.get()
    gpus = ctx.resources().get("gpu") if ctx is not None else None
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus.addresses) if gpus is not None else ""


class Scorer:
    """One loaded model: Arrow columns in, Arrow prediction arrays and counts out.

    Each batch is one call into TensorFlow, a graph of one input per kind of column: the categorical columns as their
    distinct values and codes, the numeric ones with their nulls filled and counted in numpy beforehand (TensorFlow's NaN
    test of a float64 matrix took longer than all of numpy's work), the windows, the texts (tokenized, and their tokens
    counted, in the graph), the lists padded as prepare stores them, the vectors. Eager operations one by one cost more Python than the
    model itself. A label is read from the class id, not from the graph's strings."""

    def __init__(self, export_dir: str):
        use_task_gpus()
        tf = tensorflow()
        from tfos_jobs.model.export import read_spec

        self._loaded = tf.saved_model.load(export_dir)  # keeps the function's variables alive
        signatures = self._loaded.signatures
        self.fn = signatures[contract.SERVING_SIGNATURE]
        # A wide & deep model takes the categorical columns as distinct values + codes itself.
        self.codes_fn = signatures[contract.CODES_SIGNATURE] if contract.CODES_SIGNATURE in signatures else None
        self.spec: FeatureSpec = read_spec(export_dir)
        self.task = contract.task_of(self.spec)
        self.inputs = self.spec.model_inputs
        self.features = [self.spec.get(n) for n in self.inputs]  # looked up once per worker, not per batch
        self.categorical = [f for f in self.features if isinstance(f, CategoricalFeature)]
        self.sequences = [f for f in self.features if isinstance(f, SequenceFeature)]
        self.numeric = [f for f in self.features if isinstance(f, NumericFeature)]  # the model's other inputs
        self.window = self.spec.time.window if self.sequences else 0  # steps per window of a sequence column
        self.texts = [f for f in self.features if isinstance(f, TextFeature)]
        self.lists = [f for f in self.features if isinstance(f, ListFeature)]
        self.vectors = [f for f in self.features if isinstance(f, VectorFeature)]
        self.list_width = max((f.max_length for f in self.lists), default=0)  # the lists' tensor: the longest's width
        self.vector_width = max((f.dim for f in self.vectors), default=0)
        self.vocab = {f.name: pa.array(_read_lines(contract.vocab_asset(export_dir, f.name)), pa.string())
                      for f in self.spec.with_vocabulary}
        self.defaults = np.array([[float(f.default)] for f in self.numeric] or np.zeros((0, 1)), np.float64)
        classifier = contract.udf_returns_struct(self.task) and self.task != contract.AUTOENCODER
        self.labels = pa.array(contract.class_names(self.spec), pa.string()) if classifier else None
        self._graph = self._batch_graph(tf)

    def _batch_graph(self, tf: Any) -> Any:
        """The batch's whole TensorFlow work as one function of four tensors, one per kind of column: binding a
        function's arguments costs Python per argument, on every batch. With the model's `serving_codes` the categorical
        columns stay codes into their distinct values (lookups and crosses run once per distinct value); otherwise they
        are expanded into one string per row for `serving_default`."""
        from tfos_jobs.features.text import graph_tokens, graph_words

        cats, nums, seqs, texts, lists, vectors = (self.categorical, self.numeric, self.sequences, self.texts,
                                                   self.lists, self.vectors)
        fn, codes_fn = self.fn, self.codes_fn
        # A text's tokens are counted where they are made, in the graph: 0 is no token, 1 the one OOV id.
        lookups = [tf.keras.layers.StringLookup(vocabulary=self.vocab[f.name].to_pylist(), mask_token=PAD,
                                                num_oov_indices=1) for f in texts]

        @tf.function(input_signature=[
            tf.TensorSpec([None], tf.string),  # every categorical column's distinct values, one column after another
            tf.TensorSpec([len(cats), None], tf.int32),  # per categorical column and row: an index into them
            tf.TensorSpec([len(nums), None], tf.float32),  # per numeric column and row: its value, nulls filled
            tf.TensorSpec([len(seqs), None, self.window], tf.float32),  # per sequence column and row: a window
            tf.TensorSpec([len(texts), None], tf.string),  # per text column and row: the text, nulls as ""
            tf.TensorSpec([len(lists), None, self.list_width], tf.string),  # per list: its elements, PAD after
            tf.TensorSpec([len(vectors), None, self.vector_width], tf.float32),  # per vector column: the vectors
        ], autograph=False)
        def run(strings: Any, codes: Any, numbers: Any, windows: Any, text: Any, elements: Any, vector: Any
                ) -> dict[str, Any]:
            counted = {}
            for f, column, lookup in zip(texts, tf.unstack(text, len(texts)), lookups):
                cut = tf.reduce_sum(tf.cast(graph_words(column).row_lengths() > f.max_tokens, tf.int64))
                unseen = tf.reduce_sum(tf.cast(lookup(graph_tokens(column, f)) == 1, tf.int64))
                counted.update({contract.count_key(contract.COUNT_TRUNCATED, f.name): cut,
                                contract.count_key(contract.COUNT_UNSEEN, f.name): unseen})
            if codes_fn is not None:
                return {**codes_fn(**{contract.CODES_STRINGS: strings, contract.CODES_CODES: codes,
                                      contract.CODES_NUMBERS: numbers}), **counted}
            inputs = dict(zip((f.name for f in cats), tf.unstack(tf.gather(strings, codes), len(cats))))
            inputs.update(zip((f.name for f in nums), tf.unstack(numbers, len(nums))))
            inputs.update(zip((f.name for f in seqs), tf.unstack(windows, len(seqs))))
            inputs.update(zip((f.name for f in texts), tf.unstack(text, len(texts))))
            inputs.update((f.name, x[:, :f.max_length]) for f, x in zip(lists, tf.unstack(elements, len(lists))))
            inputs.update((f.name, x[:, :f.dim]) for f, x in zip(vectors, tf.unstack(vector, len(vectors))))
            return {**fn(**inputs), **counted}

        return run

    def columns(self, batch: Any) -> dict[str, pa.Array]:
        """Name the batch's columns: a struct arrives as one StructArray, positional args as a tuple."""
        if isinstance(batch, pa.StructArray):
            names = [field.name for field in batch.type]
            missing = [n for n in self.inputs if n not in names]
            if missing:
                raise ValueError(f"the struct passed to the prediction UDF lacks feature(s) {missing}; "
                                 f"it needs: {', '.join(self.inputs)}")
            fields = dict(zip(names, batch.flatten()))  # flatten: a null struct makes its fields null
            return {n: fields[n] for n in self.inputs}
        args = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        if len(args) != len(self.inputs):
            raise ValueError(f"the prediction UDF takes {len(self.inputs)} arguments in this order: "
                             f"{', '.join(self.inputs)} (or one struct of them); got {len(args)}")
        return dict(zip(self.inputs, args))

    def feeds(self, cols: dict[str, pa.Array], counts: dict[str, int]) -> tuple[np.ndarray, ...]:
        """Columns -> the graph's four inputs, straight from Arrow buffers. A categorical column
        goes as its distinct values and a code per row: its nulls, truncation and vocabulary
        checks then touch only the distinct values. Numeric nulls are counted and filled here."""
        rows = len(next(iter(cols.values())))
        strings: list[str] = []
        codes: list[np.ndarray] = []
        number_rows: list[np.ndarray] = []
        windows: list[np.ndarray] = []
        texts: list[np.ndarray] = []
        lists: list[np.ndarray] = []
        vectors: list[np.ndarray] = []
        for f, column in zip(self.features, cols.values()):
            name = f.name
            if isinstance(f, SequenceFeature):
                windows.append(_windows(name, column, self.window))
            elif isinstance(f, TextFeature):
                texts.append(_texts(name, column, counts))
            elif isinstance(f, ListFeature):
                lists.append(_elements(f, column, self.vocab[name], self.list_width, counts))
            elif isinstance(f, VectorFeature):
                vectors.append(_vectors_in(f, column, self.vector_width, counts))
            elif isinstance(f, CategoricalFeature):
                values, column_codes = _distinct_strings(name, column, f.default)
                _count(counts, contract.count_key(contract.COUNT_NULL, name), column.null_count)
                if f.max_length is not None:
                    long = np.asarray(pc.greater(pc.utf8_length(values), f.max_length))
                    _count(counts, contract.count_key(contract.COUNT_TRUNCATED, name), _rows_of(long, column_codes))
                    values = pc.utf8_slice_codeunits(values, 0, f.max_length)
                if name in self.vocab:  # a hashed feature has no unseen values
                    unseen = ~np.asarray(pc.is_in(values, value_set=self.vocab[name]))
                    _count(counts, contract.count_key(contract.COUNT_UNSEEN, name), _rows_of(unseen, column_codes))
                codes.append(column_codes + np.int32(len(strings)))
                strings.extend(values.to_pylist())
            else:
                number_rows.append(_numeric(name, column))
        numbers = np.stack(number_rows) if number_rows else np.zeros((0, rows), np.float64)
        missing = np.isnan(numbers)  # nulls, and NaN values, take the spec's default
        for f, n in zip(self.numeric, missing.sum(axis=1).tolist()):
            _count(counts, contract.count_key(contract.COUNT_NULL, f.name), n)
        return (np.array(strings, dtype=object),
                np.stack(codes) if codes else np.zeros((0, rows), np.int32),
                np.where(missing, self.defaults, numbers).astype(np.float32),
                np.stack(windows) if windows else np.zeros((0, rows, self.window), np.float32),
                np.stack(texts) if texts else np.zeros((0, rows), object),
                np.stack(lists) if lists else np.zeros((0, rows, self.list_width), object),
                np.stack(vectors) if vectors else np.zeros((0, rows, self.vector_width), np.float32))

    def __call__(self, batch: Any, counts: dict[str, int]) -> pa.Array:
        cols = self.columns(batch)
        out = self._graph(*self.feeds(cols, counts))
        for f in self.texts:
            for kind in (contract.COUNT_TRUNCATED, contract.COUNT_UNSEEN):
                _count(counts, contract.count_key(kind, f.name), int(out[contract.count_key(kind, f.name)]))
        _count(counts, contract.COUNT_ROWS, len(next(iter(cols.values()))))
        if self.task == contract.AUTOENCODER:
            return pa.StructArray.from_arrays([
                _vectors(out[contract.LATENT].numpy()),
                pa.array(out[contract.RECONSTRUCTION_ERROR].numpy().astype(np.float64)),
                pa.array(out[contract.IS_ANOMALY].numpy()),
            ], names=list(contract.UDF_FIELDS[self.task]))
        if not contract.udf_returns_struct(self.task):
            return pa.array(out[contract.VALUE].numpy().astype(np.float64))
        assert self.labels is not None  # set for every task of a struct but the autoencoder's
        return pa.StructArray.from_arrays([
            pa.array(out[contract.PROBABILITY].numpy().astype(np.float64)),
            self.labels.take(pa.array(out[contract.CLASS_ID].numpy())),  # the LABEL output, without its strings
        ], names=list(contract.UDF_FIELDS[self.task]))


def _distinct_strings(name: str, column: pa.Array, default: str) -> tuple[pa.Array, np.ndarray]:
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


def _rows_of(flagged: np.ndarray, codes: np.ndarray) -> int:
    """How many rows hold one of the flagged distinct values: most batches have none, and then no row is looked at."""
    return int(flagged[codes].sum()) if flagged.any() else 0


def _numeric(name: str, column: pa.Array) -> np.ndarray:
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


def _windows(name: str, column: pa.Array, steps: int) -> np.ndarray:
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


def _texts(name: str, column: pa.Array, counts: dict[str, int]) -> np.ndarray:
    """A string column's values, a null as the empty text (counted); the graph tokenizes them."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise TypeError(f"column {name!r} (text feature) has type {column.type}; pass a string")
    _count(counts, contract.count_key(contract.COUNT_NULL, name), column.null_count)
    return np.asarray(pc.fill_null(column, "").to_numpy(zero_copy_only=False), dtype=object)


def _elements(f: ListFeature, column: pa.Array, vocab: pa.Array, width: int, counts: dict[str, int]) -> np.ndarray:
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
    _count(counts, contract.count_key(contract.COUNT_NULL, f.name), column.null_count + int((~kept).sum()))
    row_of = np.repeat(np.arange(rows), lengths)[kept]
    values = values.filter(pa.array(kept))
    per_row = np.bincount(row_of, minlength=rows)
    position = np.arange(len(row_of)) - (np.cumsum(per_row) - per_row)[row_of]
    _count(counts, contract.count_key(contract.COUNT_TRUNCATED, f.name), int((per_row > f.max_length).sum()))
    inside = position < f.max_length
    values = values.filter(pa.array(inside))
    _count(counts, contract.count_key(contract.COUNT_UNSEEN, f.name),
           int((~np.asarray(pc.is_in(values, value_set=vocab))).sum()))
    out = np.full((rows, width), PAD, dtype=object)
    out[row_of[inside], position[inside]] = values.to_numpy(zero_copy_only=False)
    return out


def _vectors_in(f: VectorFeature, column: pa.Array, width: int, counts: dict[str, int]) -> np.ndarray:
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
    _count(counts, contract.count_key(contract.COUNT_NULL, f.name), int(nulls.sum()))
    out = np.zeros((len(column), width), np.float32)
    out[~nulls, :f.dim] = values  # a null vector: zeros
    return out


def _vectors(matrix: np.ndarray) -> pa.Array:
    """A [rows, d] float32 matrix as a list<float> array, sharing its buffer."""
    rows, width = matrix.shape
    offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(matrix).ravel()))


def _count(counts: dict[str, int], key: str, n: int) -> None:
    if n:
        counts[key] = counts.get(key, 0) + n


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return list(dict.fromkeys(fh.read().splitlines()))


def scorer(export_dir: str, version: str) -> Scorer:
    """The cached model for this Python worker (loaded on first use)."""
    key = f"{export_dir}@{version}"
    with _lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
    model = Scorer(export_dir)
    with _lock:
        _models[key] = model
        while len(_models) > CAPACITY:
            _models.popitem(last=False)
    settle_heap()
    return model


def settle_heap() -> None:
    """Take the loaded models out of Python's cyclic garbage collector. TensorFlow leaves a few hundred thousand
    long-lived objects, which every full collection would walk again while batches allocate: in a Spark Python worker
    that walk took over a quarter of its CPU. Unfrozen first, so that an evicted model can be collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def make_udf_function(model: "ShippedModel", counter, batch_size: int | None, counted: bool = False
                      ) -> Callable[[Iterator[Any]], Iterator[pa.Array]]:
    """The Arrow iterator function behind the UDF, calling the model on `batch_size` rows (None: on
    each Arrow batch); captures plain values and an accumulator (None from a Spark Connect client).
    `counted`: each result comes with its counters (`contracts.serving.counted_return_type`)."""

    def predict(batches: Iterator[Any]) -> Iterator[pa.Array]:
        from udfs.shipping import local_copy

        scoring = scorer(local_copy(model), model.version)
        for batch in batches if batch_size is None else in_batches_of(batch_size, batches):
            counts: dict[str, int] = {}
            out = scoring(batch, counts)
            if counter is not None:
                counter.add(counts)  # per batch: a LIMIT may stop the task before the input ends
            yield with_counts(out, counts) if counted else out

    return predict


def in_batches_of(size: int, batches: Iterator[Any]) -> Iterator[Any]:
    """The UDF's input (batches of one column, or tuples of columns) cut again into `size` rows:
    larger Arrow batches split (slices, no copy), smaller ones gathered, the rest yielded at the
    end. pyspark's worker.py (SQL_SCALAR_ARROW_ITER_UDF) checks only that the results never
    outnumber the rows consumed so far and that the totals match (`verify_output_row_limit`,
    `verify_iter_result_row_count`); the JVM pairs result rows with its queue of input rows in order."""
    held: list[pa.RecordBatch] = []  # rows consumed and not yet yielded, in order
    rows, single = 0, True
    for batch in batches:
        single = not isinstance(batch, (tuple, list))
        columns = [batch] if single else list(batch)
        held.append(pa.RecordBatch.from_arrays(columns, names=[str(i) for i in range(len(columns))]))
        rows += len(columns[0])
        while rows >= size:
            whole = held[0] if len(held) == 1 else pa.concat_batches(held)
            part, held, rows = whole.slice(0, size), [whole.slice(size)], rows - size
            yield part.column(0) if single else tuple(part.columns)
    if rows:
        part = held[0] if len(held) == 1 else pa.concat_batches(held)
        yield part.column(0) if single else tuple(part.columns)


def with_counts(out: pa.Array, counts: dict[str, int]) -> pa.Array:
    """`out` and the batch's `counts` (a map on the first row, empty on the others)."""
    rows = len(out)
    offsets = np.full(rows + 1, len(counts), dtype=np.int32)
    offsets[0] = 0
    maps = pa.MapArray.from_arrays(pa.array(offsets), pa.array(list(counts), pa.string()),
                                   pa.array(list(counts.values()), pa.int64()))
    return pa.StructArray.from_arrays([out, maps], names=[contract.COUNTED_VALUE, contract.COUNTED])
