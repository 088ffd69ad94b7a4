"""P4's and P9's sides, and the floor.

* in-process: the SavedModel's concrete `serving_default` called in this one process on the
  same rows, batch after batch of the same size the UDF gets, tensors built from ready numpy
  columns (nulls filled beforehand, untimed): the model's own speed. Beside it, its
  `serving_codes` on the same rows held as the UDF holds them (encoded beforehand, untimed).
* the UDF: the registered SQL function over the same rows, cached in Spark.
* Spark's own: `pyspark.ml.functions.predict_batch_udf` with the `make_predict_fn` Spark's
  documentation shows (load the model once, call its serving signature on each batch of numpy
  columns), filling nulls as the spec says so that it scores the same rows to the same values.
* the floor: an Arrow UDF with the same input and output types that returns constants. It
  pays everything Spark and Arrow cost and nothing of the model, so it bounds the UDF.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import inspect

import numpy as np
import pandas as pd
import pyarrow as pa

from tfos_jobs.contracts import serving as contract
from tfos_jobs.features.spec import CategoricalFeature, FeatureSpec, TextFeature


def numpy_inputs(frame: pd.DataFrame, spec: FeatureSpec) -> dict[str, np.ndarray]:
    """The model inputs as the concrete function takes them, nulls filled as serving does."""
    out = {}
    for name in spec.model_inputs:
        f = spec.get(name)
        column = frame[name]
        if isinstance(f, CategoricalFeature):
            out[name] = column.where(column.notna(), f.default).astype(str).to_numpy(dtype=object)
        else:
            out[name] = column.astype("float64").fillna(float(f.default)).to_numpy(dtype=np.float32)
    return out


def in_process_rows_per_sec(fn: Any, inputs: dict[str, np.ndarray], batch_size: int) -> float:
    """Rows/s of the concrete function alone, fed `batch_size` rows per call."""
    import tensorflow as tf

    rows = len(next(iter(inputs.values())))
    started = time.perf_counter()
    for start in range(0, rows, batch_size):
        out = fn(**{k: tf.constant(v[start:start + batch_size]) for k, v in inputs.items()})
        next(iter(out.values())).numpy()
    return rows / (time.perf_counter() - started)


def codes_inputs(inputs: dict[str, np.ndarray], spec: FeatureSpec) -> dict[str, np.ndarray]:
    """The same rows as `serving_codes` takes them (contracts.serving): the categorical columns'
    distinct values and a code per row into them, the numeric columns stacked."""
    strings: list[str] = []
    codes = []
    for f in spec.categorical:
        values, index = np.unique(inputs[f.name].astype(str), return_inverse=True)
        codes.append(index.astype(np.int32) + len(strings))
        strings.extend(values.tolist())
    return {contract.CODES_STRINGS: np.array(strings, dtype=object), contract.CODES_CODES: np.stack(codes),
            contract.CODES_NUMBERS: np.stack([inputs[f.name] for f in spec.numeric]).astype(np.float32)}


def in_process_codes_rows_per_sec(fn: Any, inputs: dict[str, np.ndarray], batch_size: int) -> float:
    """Rows/s of `serving_codes` alone on `codes_inputs`, `batch_size` rows per call (each call
    is given every distinct value: a few hundred strings)."""
    import tensorflow as tf

    strings = tf.constant(inputs[contract.CODES_STRINGS])
    codes, numbers = inputs[contract.CODES_CODES], inputs[contract.CODES_NUMBERS]
    rows = codes.shape[1]
    started = time.perf_counter()
    for start in range(0, rows, batch_size):
        out = fn(**{contract.CODES_STRINGS: strings,
                    contract.CODES_CODES: tf.constant(codes[:, start:start + batch_size]),
                    contract.CODES_NUMBERS: tf.constant(numbers[:, start:start + batch_size])})
        next(iter(out.values())).numpy()
    return rows / (time.perf_counter() - started)


def make_noop(task: str) -> Callable[[Iterator[Any]], Iterator[pa.Array]]:
    """The floor's function: same output type as the prediction UDF, no model."""

    def noop(batches: Iterator[Any]) -> Iterator[pa.Array]:
        for batch in batches:
            n = len(batch) if isinstance(batch, pa.Array) else len(batch[0])
            if not contract.udf_returns_struct(task):
                yield pa.array(np.zeros(n))
            else:
                yield pa.StructArray.from_arrays([pa.array(np.zeros(n)), pa.array([""] * n, pa.string())],
                                                 names=list(contract.UDF_FIELDS[task]))

    return noop


def spark_predict_batch_udf(export_dir: str, spec: FeatureSpec, batch_size: int) -> Any:
    """`predict_batch_udf` over the model's inputs (as columns, in spec order) for a binary or
    multiclass model of categorical, numeric and text inputs, returning the same struct as the
    package's UDF."""
    from pyspark.ml.functions import predict_batch_udf

    names = spec.model_inputs
    texts = {f.name for f in spec.features if isinstance(f, TextFeature)}
    defaults = {n: "" if n in texts else getattr(spec.get(n), "default") for n in names}
    categorical = {f.name for f in spec.categorical} | texts
    task = contract.task_of(spec)

    def make_predict_fn() -> Callable[..., dict[str, np.ndarray]]:
        import tensorflow as tf

        fn = tf.saved_model.load(export_dir).signatures[contract.SERVING_SIGNATURE]

        def predict(*columns: np.ndarray) -> dict[str, np.ndarray]:
            inputs = {}
            for name, column in zip(names, columns):
                if name in categorical:
                    inputs[name] = tf.constant(np.where(pd.isna(column), defaults[name], column).astype(str))
                else:
                    inputs[name] = tf.constant(np.nan_to_num(column.astype(np.float64), nan=float(defaults[name])),
                                               dtype=tf.float32)
            out = fn(**inputs)
            return {contract.PROBABILITY: out[contract.PROBABILITY].numpy().astype(np.float64),
                    contract.LABEL: np.char.decode(out[contract.LABEL].numpy().astype(bytes), "utf-8")}

        # one parameter per input column, as a hand-written `def predict(age, workclass, ...)` has
        predict.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
        return predict

    return predict_batch_udf(make_predict_fn, return_type=contract.udf_return_type(task), batch_size=batch_size)


def every_field_sql(function: str, task: str, table: str, args: str) -> str:
    """`score_sql`, each field of the result consumed (the label too, where there is one)."""
    if not contract.udf_returns_struct(task):
        return score_sql(function, task, table, args)
    first, *rest = contract.UDF_FIELDS[task]
    others = "".join(f", max(s.{f}) AS {f}" for f in rest)
    return f"SELECT count(*) AS n, sum(s.{first}) AS total{others} FROM (SELECT {function}({args}) AS s FROM {table})"


def score_sql(function: str, task: str, table: str, args: str = "struct(*)", plain: bool = False) -> str:
    """One query that makes Spark score every row: the sum of the predictions. `plain`: the
    function returns the probability itself, not the UDF's result for `task`."""
    field = contract.udf_returns_struct(task) and not plain
    value = f"{function}({args})" + (f".{contract.PROBABILITY}" if field else "")
    return f"SELECT count(*) AS n, sum({value}) AS total FROM {table}"
