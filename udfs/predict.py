"""Executor side of the prediction UDF: a SavedModel loaded once per Python worker, called on
Arrow batches through its concrete `serving_default` function (not `model.predict`).

Inputs are the raw feature columns, in spec order or as one struct. Serving applies the same
rules as preparation: a null takes the spec's default, a category outside the vocabulary goes
to the model's out-of-vocabulary buckets; both are counted.
"""
from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from tfos_jobs.contracts import serving as contract
from tfos_jobs.features.spec import CategoricalFeature, FeatureSpec, SequenceFeature

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
    """One loaded model: raw numpy columns in, prediction arrays and counts out."""

    def __init__(self, export_dir: str):
        use_task_gpus()
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        import tensorflow as tf

        from tfos_jobs.model.export import read_spec

        self._tf = tf
        self._loaded = tf.saved_model.load(export_dir)  # keeps the function's variables alive
        self.fn = self._loaded.signatures[contract.SERVING_SIGNATURE]
        self.spec: FeatureSpec = read_spec(export_dir)
        self.task = contract.task_of(self.spec)
        self.inputs = self.spec.model_inputs
        self.vocab = {f.name: _vocab_index(contract.vocab_asset(export_dir, f.name)) for f in self.spec.categorical}

    def columns(self, batch: Any) -> dict[str, pd.Series]:
        """Name the batch's columns: a struct arrives as a DataFrame, positional args as a tuple."""
        if isinstance(batch, pd.DataFrame):
            missing = [n for n in self.inputs if n not in batch.columns]
            if missing:
                raise ValueError(f"the struct passed to the prediction UDF lacks feature(s) {missing}; "
                                 f"it needs: {', '.join(self.inputs)}")
            return {n: batch[n] for n in self.inputs}
        if len(batch) != len(self.inputs):
            raise ValueError(f"the prediction UDF takes {len(self.inputs)} arguments in this order: "
                             f"{', '.join(self.inputs)} (or one struct of them); got {len(batch)}")
        return dict(zip(self.inputs, batch))

    def prepare(self, cols: dict[str, pd.Series], counts: dict[str, int]) -> dict[str, Any]:
        """Columns -> tensors, nulls filled and counted. Vectorised throughout: this runs on
        every batch, and in the Python worker it competes with the model for the CPU."""
        tensors = {}
        for name, series in cols.items():
            f = self.spec.get(name)
            if isinstance(f, SequenceFeature):
                tensors[name] = self._tf.constant(_windows(name, series, self.spec.time.window))
                continue
            if isinstance(f, CategoricalFeature):
                values, nulls = _strings(series, f.default)
                if f.max_length is not None:
                    long = np.array([len(v) > f.max_length for v in values], dtype=bool)
                    _count(counts, f"truncated:{name}", int(long.sum()))
                    values = np.where(long, [v[: f.max_length] for v in values], values)
                _count(counts, f"unseen:{name}", int((self.vocab[name].get_indexer(values) < 0).sum()))
                tensors[name] = self._tf.constant(values, dtype=self._tf.string)
            else:
                numbers = _numeric(name, series)
                nulls = np.isnan(numbers)
                if nulls.any():
                    numbers = np.where(nulls, float(f.default), numbers)
                tensors[name] = self._tf.constant(numbers.astype(np.float32))
            _count(counts, f"null:{name}", int(nulls.sum()))
        return tensors

    def __call__(self, batch: Any, counts: dict[str, int]) -> pd.DataFrame | pd.Series:
        cols = self.columns(batch)
        out = self.fn(**self.prepare(cols, counts))
        _count(counts, "rows", len(next(iter(cols.values()))))
        if self.task == contract.AUTOENCODER:
            return pd.DataFrame({
                contract.LATENT: list(out[contract.LATENT].numpy()),
                contract.RECONSTRUCTION_ERROR: out[contract.RECONSTRUCTION_ERROR].numpy().astype("float64"),
                contract.IS_ANOMALY: out[contract.IS_ANOMALY].numpy(),
            })
        if not contract.udf_returns_struct(self.task):
            return pd.Series(out[contract.VALUE].numpy().astype("float64"))
        return pd.DataFrame({
            contract.PROBABILITY: out[contract.PROBABILITY].numpy().astype("float64"),
            contract.LABEL: _decode(out[contract.LABEL].numpy()),
        })


def _strings(series: pd.Series, default: str) -> tuple[np.ndarray, np.ndarray]:
    """(values as an object array of str with nulls replaced by `default`, null mask). Arrow
    hands string columns over as str objects already: only other types pay for a conversion."""
    values = series.to_numpy(dtype=object)
    nulls = pd.isna(values)
    if nulls.any():
        values = np.where(nulls, default, values)
    if pd.api.types.infer_dtype(values, skipna=False) != "string":
        values = values.astype(str).astype(object)
    return values, nulls


def _decode(labels: np.ndarray) -> np.ndarray:
    """Label bytes -> str, decoding each distinct label once."""
    codes, uniques = pd.factorize(labels)
    return np.asarray([u.decode() for u in uniques], dtype=object)[codes]


def _windows(name: str, series: pd.Series, steps: int) -> np.ndarray:
    """A column of arrays (one window of one sensor per row) as a [rows, steps] float32 matrix.
    Windows come filled from the `windows` view; a null, a short window or a NaN is an error."""
    values = series.to_numpy(dtype=object)
    if not len(values):
        return np.zeros((0, steps), np.float32)
    try:  # one copy for the whole batch; rows are looked at one by one only to name a bad one
        matrix = np.stack(values).astype(np.float32)
    except (ValueError, TypeError):
        matrix = None
    if matrix is None or matrix.shape[1:] != (steps,):
        i, v = next((i, v) for i, v in enumerate(values) if v is None or len(v) != steps)
        got = "a null" if v is None else f"{len(v)} values"
        raise ValueError(f"column {name!r} (sequence feature): the model takes windows of {steps} values, "
                         f"row {i} of a batch has {got}")
    if np.isnan(matrix).any():
        raise ValueError(f"column {name!r} (sequence feature): a window holds null values; fill them first "
                         "(the `windows` view of tfos sql has them filled as in training)")
    return matrix


def _numeric(name: str, series: pd.Series) -> np.ndarray:
    if series.dtype.kind in "biuf":  # bool, int, float: nothing to check
        return series.to_numpy(dtype="float64", na_value=np.nan)
    if series.dtype == object and series.map(lambda v: isinstance(v, (str, bytes))).any():
        example = series[series.map(lambda v: isinstance(v, (str, bytes)))].iloc[0]
        raise TypeError(f"column {name!r} (numeric feature) got text values such as {example!r}; pass a number")
    return pd.to_numeric(series, errors="raise").to_numpy(dtype="float64", na_value=np.nan)


def _count(counts: dict[str, int], key: str, n: int) -> None:
    if n:
        counts[key] = counts.get(key, 0) + n


def _vocab_index(path: str) -> pd.Index:
    """A hashed index of the vocabulary: a batch is checked against it with one lookup per
    value (np.isin sorted both sides on every batch)."""
    return pd.Index(list(dict.fromkeys(_read_lines(path))), dtype=object)


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()


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
    return model


def make_udf_function(export_dir: str, version: str, counter) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The pandas iterator function behind the UDF; captures plain values and an accumulator."""

    def predict(batches: Iterator[Any]) -> Iterator[Any]:
        model = scorer(export_dir, version)
        for batch in batches:
            counts: dict[str, int] = {}
            out = model(batch, counts)
            counter.add(counts)  # per batch: a LIMIT may stop the task before the input ends
            yield out

    return predict
