"""Driver side of the prediction UDF: check a model directory, then register it for SQL.

    from udfs import register
    predict = register(spark, "predict_income", "demo-output/model")
    spark.sql("SELECT *, predict_income(struct(*)) AS p FROM people_features")
    predict.counts()   # rows scored, nulls filled and unseen categories, per feature

Everything is checked before any query runs: the directory, its SavedModel and signatures,
the feature spec in its assets.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

from pyspark import AccumulatorParam
from pyspark.sql import Column, SparkSession
from pyspark.sql.functions import ArrowUDFType, arrow_udf
from tfos_jobs.contracts import serving as contract
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec
from udfs.predict import make_udf_function


class CounterParam(AccumulatorParam):
    """Sums dicts of counts: how many rows, nulls and unseen categories the UDF met."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        for key, n in b.items():
            a[key] = a.get(key, 0) + n
        return a


@dataclass
class PredictionUdf:
    name: str
    export_dir: str
    spec: FeatureSpec
    udf: Any
    counter: Any

    def __call__(self, *cols: Column | str) -> Column:
        """The UDF on DataFrame columns: the features in spec order, or none for all of them.
        Passed as arguments, not as one struct: Spark then builds no struct per row."""
        return self.udf(*(cols or self.spec.model_inputs))

    def counts(self) -> dict[str, int]:
        """Totals so far over every query that used this UDF (updated when a query finishes)."""
        return dict(sorted(self.counter.value.items()))


def resolve_export_dir(model_dir: str) -> str:
    """The SavedModel directory: `model_dir` itself or its `saved_model/`. Refuses anything else."""
    if not model_dir or "\0" in model_dir:
        raise ConfigError(f"model directory {model_dir!r} is not a valid path")
    path = os.path.realpath(model_dir)
    for candidate in (path, os.path.join(path, "saved_model")):
        if os.path.isfile(os.path.join(candidate, "saved_model.pb")):
            return candidate
    if not os.path.isdir(path):
        raise ConfigError(f"model directory {model_dir!r} does not exist")
    raise ConfigError(f"{model_dir!r} holds no SavedModel (no saved_model.pb in it or in its saved_model/)")


def check_model(export_dir: str) -> tuple[FeatureSpec, str]:
    """Load the model once on the driver: a missing spec, a corrupt graph or a missing
    signature fails here, naming the directory, instead of in every task of a query."""
    spec_path = contract.spec_asset(export_dir)
    try:
        with open(spec_path, encoding="utf-8") as fh:
            spec = FeatureSpec.from_json(fh.read())
    except FileNotFoundError:
        raise ConfigError(f"{export_dir!r} has no {os.path.relpath(spec_path, export_dir)}: it was not exported by "
                          "tfos train") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{spec_path!r} is not a valid feature spec: {e}") from None
    missing = [f.name for f in spec.categorical if not os.path.isfile(contract.vocab_asset(export_dir, f.name))]
    if missing:
        where = os.path.dirname(os.path.relpath(contract.vocab_asset(export_dir, missing[0]), export_dir))
        raise ConfigError(f"{export_dir!r} lacks vocabularies for {missing} in {where}/")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    try:
        signatures = tf.saved_model.load(export_dir).signatures
    except Exception as e:  # TF raises several types for unreadable models
        raise ConfigError(f"cannot load the SavedModel in {export_dir!r}: {str(e).splitlines()[0]}") from None
    absent = [s for s in contract.SIGNATURES if s not in signatures]
    if absent:
        raise ConfigError(f"the SavedModel in {export_dir!r} lacks signature(s) {absent}; it has {list(signatures)}")
    serving = signatures[contract.SERVING_SIGNATURE]
    inputs = sorted(serving.structured_input_signature[1])
    if inputs != sorted(spec.model_inputs):
        raise ConfigError(f"the SavedModel's inputs {inputs} do not match its feature spec {list(spec.model_inputs)}")
    task = contract.task_of(spec)
    outputs, expected = sorted(serving.structured_outputs), sorted(contract.SIGNATURE_OUTPUTS[task])
    if outputs != expected:
        raise ConfigError(f"the SavedModel's outputs {outputs} are not those of a {task} model ({expected})")
    version = str(os.stat(os.path.join(export_dir, "saved_model.pb")).st_mtime_ns)
    return spec, version


def register(spark: SparkSession, name: str, model_dir: str, *, batch_size: int | None = None) -> PredictionUdf:
    """Register `name` as a SQL function scoring with the model in `model_dir`."""
    export_dir = resolve_export_dir(model_dir)
    spec, version = check_model(export_dir)
    if batch_size:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_size))
    counter = spark.sparkContext.accumulator({}, CounterParam())
    with warnings.catch_warnings():  # one function serves both call forms (args or a struct), which type hints cannot express
        warnings.simplefilter("ignore", UserWarning)
        udf = arrow_udf(make_udf_function(export_dir, version, counter), contract.udf_return_type(contract.task_of(spec)),
                        ArrowUDFType.SCALAR_ITER)
    spark.udf.register(name, udf)
    return PredictionUdf(name, export_dir, spec, udf, counter)

