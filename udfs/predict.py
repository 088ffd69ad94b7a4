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
from tfos_jobs.features.spec import (CategoricalFeature, FeatureSpec, KeyFeature, ListFeature, NumericFeature,
                                     SequenceFeature, TextFeature, VectorFeature)
from tfos_jobs.features.text import PAD
from udfs import arrow_inputs, text_ids
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
    test of a float64 matrix took longer than all of numpy's work), the windows, the texts (token ids made from their
    Arrow buffers, `udfs.text_ids`, for a model with `serving_ids`; else tokenized and counted in the graph), the lists
    padded as prepare stores them, the vectors. Eager operations one by one cost more Python than the model itself. A
    label is read from the class id, not from the graph's strings."""

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
        # Columns of strings: categoricals, and an autoencoder's key (the window's asset)
        self.categorical = [f for f in self.features if isinstance(f, (CategoricalFeature, KeyFeature))]
        self.sequences = [f for f in self.features if isinstance(f, SequenceFeature)]
        self.numeric = [f for f in self.features if isinstance(f, NumericFeature)]  # the model's other inputs
        self.window = self.spec.time.window if self.sequences else 0  # steps per window of a sequence column
        self.texts = [f for f in self.features if isinstance(f, TextFeature)]
        self.lists = [f for f in self.features if isinstance(f, ListFeature)]
        self.vectors = [f for f in self.features if isinstance(f, VectorFeature)]
        self.list_width = max((f.max_length for f in self.lists), default=0)  # the lists' tensor: the longest's width
        self.vector_width = max((f.dim for f in self.vectors), default=0)
        # ... and its texts as token ids, made from the Arrow buffers (`udfs.text_ids`) instead of by its tokenizer
        takes_ids = contract.IDS_SIGNATURE in signatures and all(text_ids.takes_ids(f) for f in self.texts)
        self.ids_fn = signatures[contract.IDS_SIGNATURE] if takes_ids else None
        self.text_width = max((f.width() for f in self.texts), default=0)
        self.vocab = {f.name: pa.array(_read_lines(contract.vocab_asset(export_dir, f.name)), pa.string())
                      for f in self.spec.with_vocabulary}
        if self.sequences and self.spec.key is not None:  # an asset not among the train split's is counted as unseen
            self.vocab[self.spec.key.name] = pa.array(trained_assets(export_dir, self.spec), pa.string())
        self.defaults = np.array([[float(f.default)] for f in self.numeric] or np.zeros((0, 1)), np.float64)
        classifier = contract.udf_returns_struct(self.task) and self.task != contract.AUTOENCODER
        self.labels = pa.array(contract.class_names(self.spec), pa.string()) if classifier else None
        self._graph = self._batch_graph(tf)

    def _batch_graph(self, tf: Any) -> Any:
        """The batch's whole TensorFlow work as one function of a tensor per kind of column: binding a function's
        arguments costs Python per argument, on every batch. With the model's `serving_codes` the categorical columns
        stay codes into their distinct values (lookups and crosses run once per distinct value); otherwise they are
        expanded into one string per row for `serving_default`, or for `serving_ids` with the texts' token ids (then
        made and counted beforehand; otherwise here, by the model's rule)."""
        from tfos_jobs.features.text import graph_words, tokens_of_words

        cats, nums, seqs, texts, lists, vectors = (self.categorical, self.numeric, self.sequences, self.texts,
                                                   self.lists, self.vectors)
        fn, codes_fn, ids_fn = self.fn, self.codes_fn, self.ids_fn
        # A text's tokens are counted where they are made, in the graph: 0 is no token, 1 the one OOV id.
        lookups = [tf.keras.layers.StringLookup(vocabulary=self.vocab[f.name].to_pylist(), mask_token=PAD,
                                                num_oov_indices=1) for f in texts] if ids_fn is None else []

        @tf.function(input_signature=[
            tf.TensorSpec([None], tf.string),  # every categorical column's distinct values, one column after another
            tf.TensorSpec([len(cats), None], tf.int32),  # per categorical column and row: an index into them
            tf.TensorSpec([len(nums), None], tf.float32),  # per numeric column and row: its value, nulls filled
            tf.TensorSpec([len(seqs), None, self.window], tf.float32),  # per sequence column and row: a window
            tf.TensorSpec([len(texts), None], tf.string) if ids_fn is None  # per text column and row: the text, or
            else tf.TensorSpec([len(texts), None, self.text_width], tf.int64),  # ... its token ids (0 after them)
            tf.TensorSpec([len(lists), None, self.list_width], tf.string),  # per list: its elements, PAD after
            tf.TensorSpec([len(vectors), None, self.vector_width], tf.float32),  # per vector column: the vectors
        ], autograph=False)
        def run(strings: Any, codes: Any, numbers: Any, windows: Any, text: Any, elements: Any, vector: Any
                ) -> dict[str, Any]:
            counted = {}
            for f, column, lookup in zip(texts, tf.unstack(text, len(texts)), lookups):
                words = graph_words(column)
                cut = tf.reduce_sum(tf.cast(words.row_lengths() > f.max_tokens, tf.int64))
                unseen = tf.reduce_sum(tf.cast(lookup(tokens_of_words(words, f)) == 1, tf.int64))
                counted.update({contract.count_key(contract.COUNT_TRUNCATED, f.name): cut,
                                contract.count_key(contract.COUNT_UNSEEN, f.name): unseen})
            if codes_fn is not None:
                return {**codes_fn(**{contract.CODES_STRINGS: strings, contract.CODES_CODES: codes,
                                      contract.CODES_NUMBERS: numbers}), **counted}
            inputs = dict(zip((f.name for f in cats), tf.unstack(tf.gather(strings, codes), len(cats))))
            inputs.update(zip((f.name for f in nums), tf.unstack(numbers, len(nums))))
            inputs.update(zip((f.name for f in seqs), tf.unstack(windows, len(seqs))))
            inputs.update((f.name, x[:, :f.max_length]) for f, x in zip(lists, tf.unstack(elements, len(lists))))
            inputs.update((f.name, x[:, :f.dim]) for f, x in zip(vectors, tf.unstack(vector, len(vectors))))
            if ids_fn is not None:
                return ids_fn(**inputs, **{f.name: x[:, :f.width()] for f, x in zip(texts, tf.unstack(text, len(texts)))})
            inputs.update(zip((f.name for f in texts), tf.unstack(text, len(texts))))
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
        """Columns -> the graph's inputs, straight from Arrow buffers. A categorical column
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
                windows.append(arrow_inputs.windows(name, column, self.window))
            elif isinstance(f, TextFeature) and self.ids_fn is not None:
                ids = text_ids.text_ids(f, column, self.vocab[name], counts)
                texts.append(np.pad(ids, ((0, 0), (0, self.text_width - ids.shape[1]))))
            elif isinstance(f, TextFeature):
                texts.append(arrow_inputs.texts(name, column, counts))
            elif isinstance(f, ListFeature):
                lists.append(arrow_inputs.elements(f, column, self.vocab[name], self.list_width, counts))
            elif isinstance(f, VectorFeature):
                vectors.append(arrow_inputs.vectors(f, column, self.vector_width, counts))
            elif isinstance(f, (CategoricalFeature, KeyFeature)):
                values, column_codes = arrow_inputs.distinct_strings(name, column, getattr(f, "default", ""))
                arrow_inputs.count(counts, contract.count_key(contract.COUNT_NULL, name), column.null_count)
                if isinstance(f, CategoricalFeature) and f.max_length is not None:
                    long = np.asarray(pc.greater(pc.utf8_length(values), f.max_length))
                    arrow_inputs.count(counts, contract.count_key(contract.COUNT_TRUNCATED, name), arrow_inputs.rows_of(long, column_codes))
                    values = pc.utf8_slice_codeunits(values, 0, f.max_length)
                if name in self.vocab:  # a hashed feature has no unseen values
                    unseen = ~np.asarray(pc.is_in(values, value_set=self.vocab[name]))
                    arrow_inputs.count(counts, contract.count_key(contract.COUNT_UNSEEN, name), arrow_inputs.rows_of(unseen, column_codes))
                codes.append(column_codes + np.int32(len(strings)))
                strings.extend(values.to_pylist())
            else:
                number_rows.append(arrow_inputs.numbers(name, column))
        numbers = np.stack(number_rows) if number_rows else np.zeros((0, rows), np.float64)
        missing = np.isnan(numbers)  # nulls, and NaN values, take the spec's default
        for f, n in zip(self.numeric, missing.sum(axis=1).tolist()):
            arrow_inputs.count(counts, contract.count_key(contract.COUNT_NULL, f.name), n)
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
        for f in self.texts if self.ids_fn is None else ():  # counted in the graph
            for kind in (contract.COUNT_TRUNCATED, contract.COUNT_UNSEEN):
                arrow_inputs.count(counts, contract.count_key(kind, f.name), int(out[contract.count_key(kind, f.name)]))
        arrow_inputs.count(counts, contract.COUNT_ROWS, len(next(iter(cols.values()))))
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


def _vectors(matrix: np.ndarray) -> pa.Array:
    """A [rows, d] float32 matrix as a list<float> array, sharing its buffer."""
    rows, width = matrix.shape
    offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(matrix).ravel()))


def trained_assets(export_dir: str, spec: FeatureSpec) -> list[str]:
    """The assets an autoencoder has statistics of (`_meta/stats.json` under the key)."""
    import json

    from tfos_jobs.features.standardisation import STATS_PER_ASSET

    assert spec.key is not None  # the caller checked
    with open(contract.stats_asset(export_dir), encoding="utf-8") as f:
        return sorted((json.load(f).get(spec.key.name) or {}).get(STATS_PER_ASSET, {}))


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
