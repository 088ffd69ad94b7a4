"""P4's two sides and its floor.

* in-process: the SavedModel's concrete `serving_default` called in this one process on the
  same rows, batch after batch of the same size the UDF gets, tensors built from ready numpy
  columns (nulls filled beforehand, untimed): the best a Python process can do.
* the UDF: the registered SQL function over the same rows, cached in Spark.
* the floor: a pandas UDF with the same input and output types that returns constants. It
  pays everything Spark and Arrow cost and nothing of the model, so it bounds the UDF.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from tfos_jobs.contracts import serving as contract
from tfos_jobs.features.spec import CategoricalFeature, FeatureSpec


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


def make_noop(task: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The floor's function: same output shape as the prediction UDF, no model."""

    def noop(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            n = len(batch) if isinstance(batch, pd.DataFrame) else len(batch[0])
            if not contract.udf_returns_struct(task):
                yield pd.Series(np.zeros(n))
            else:
                yield pd.DataFrame({contract.PROBABILITY: np.zeros(n), contract.LABEL: np.full(n, "", dtype=object)})

    return noop


def score_sql(function: str, task: str, table: str) -> str:
    """One query that makes Spark score every row: the sum of the predictions."""
    value = f"{function}(struct(*))" + (f".{contract.PROBABILITY}" if contract.udf_returns_struct(task) else "")
    return f"SELECT count(*) AS n, sum({value}) AS total FROM {table}"
