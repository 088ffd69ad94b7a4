"""P12: one trained model registered twice, as tfos logs it (`models:/NAME/1`, served by this
package's UDF) and as MLflow's own `mlflow.tensorflow.log_model` logs a Keras model
(`models:/NAME/2`, served by `mlflow.pyfunc.spark_udf`, which calls Keras `model.predict` on
every batch): same weights, rows, Arrow batch size and call form (the inputs as columns). Version
2 is the Keras model rebuilt from the SavedModel's assets (spec, stats, vocabularies) and the
bench's model config, with the SavedModel's variables restored, checked to score as the
SavedModel does.

Beside it, `spark_udf` on version 1: tfos's python_function scores with the UDF's own Scorer, kept
once per Python worker, so what differs from the UDF is the way each runs in Spark. With a model
that costs nothing on both sides (the no-op Arrow UDF; tfos's python_function with a scorer that
returns constants, its conversions kept), the ratio of the two is the most that difference can be."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Callable

import mlflow.pyfunc
import pyarrow as pa

from benchmarks import scoring
from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.tracking.pyfunc_model import SAVED_MODEL, SavedModelPyfunc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MODEL = "bench"
TFOS_PYFUNC = "P12 spark_udf tfos"  # run.details keys, read by benchmarks.report
FREE_OURS = "P12 free model ours"
FREE_MLFLOW = "P12 free model mlflow"
KERAS_LOAD = "P12 keras load"
TASKS = "P12 tasks"


class _FreeScorer:
    """The Scorer's interface with a model that costs nothing: constants of the UDF's type."""

    def __init__(self, export_dir: str):
        from tfos_jobs.contracts.serving import task_of
        from tfos_jobs.model.export import read_spec

        spec = read_spec(export_dir)
        self.inputs = spec.model_inputs
        self._noop = scoring.make_noop(task_of(spec))

    def __call__(self, batch: pa.StructArray, counts: dict) -> pa.Array:
        return next(self._noop(iter([batch])))


class FreeModelPyfunc(SavedModelPyfunc):
    """tfos's python_function with its conversions and a model that costs nothing."""

    def load_context(self, context):
        self.scorer = _FreeScorer(context.artifacts[SAVED_MODEL])


def register_bench_model(bench: Bench, local_saved_model: str) -> str:
    """The bench's model logged and registered as version 1 of MODEL in a SQLite store under the
    bench's work directory; the store's URI."""
    from mlflow import MlflowClient

    from tfos_jobs.config.tracking import TrackingConfig
    from tfos_jobs.tracking.model_log import log_model
    from tfos_jobs.tracking.run_logger import Tracking

    store = os.path.join(bench.work, "mlflow")
    shutil.rmtree(store, ignore_errors=True)  # a kept --workdir holds the last run's
    os.makedirs(store)
    uri = f"sqlite:///{store}/mlflow.db"
    MlflowClient(uri).create_experiment(MODEL, artifact_location=f"file://{store}/artifacts")
    tracking = Tracking(TrackingConfig(uri=uri, experiment=MODEL, register=MODEL), bench.say)
    run = tracking.start_run("bench model")
    with tempfile.TemporaryDirectory(prefix="tfos-bench-model-") as workdir:
        log_model(run, local_saved_model, workdir, MODEL, "", bench.say)
        run.end()
        if not tracking.wait():
            raise RuntimeError(f"could not register the bench's model in {uri}")
    return uri


def register_keras_flavour(bench: Bench, uri: str, local_saved_model: str, spec: FeatureSpec,
                           inputs: "DataFrame") -> str:
    """The bench's model (`spec`: the one in its assets) as MLflow's own `mlflow.tensorflow.log_model`
    logs a Keras model, with a signature of `inputs`' column types, registered as the next version
    of MODEL; its URI."""
    import mlflow.tensorflow
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    from tfos_jobs.contracts import serving as contract
    from tfos_jobs.model.builder import resolve_build
    from tfos_jobs.model.export import load_signature
    from tfos_jobs.tf_import import tensorflow

    tf = tensorflow()
    with open(contract.stats_asset(local_saved_model), encoding="utf-8") as fh:
        stats = json.load(fh)
    vocab = {}
    for f in spec.categorical:
        with open(contract.vocab_asset(local_saved_model, f.name), encoding="utf-8") as fh:
            vocab[f.name] = fh.read().splitlines()
    model_cfg = bench.big.train.model
    model = resolve_build(model_cfg.kind)(spec, vocab, stats, model_cfg)
    model.load_weights(os.path.join(local_saved_model, "variables", "variables")).assert_existing_objects_matched()
    frame = inputs.limit(1000).toPandas()
    sample = scoring.numpy_inputs(frame, spec)
    exported = load_signature(local_saved_model)(**{c: tf.constant(v) for c, v in sample.items()})[contract.PROBABILITY]
    rebuilt = model.predict(sample, verbose=0)
    if not np.allclose(np.ravel(rebuilt), exported.numpy(), atol=1e-5):
        raise RuntimeError("the Keras model rebuilt for P12 does not score as the bench's SavedModel")
    signature = ModelSignature(  # the types spark_udf hands the model: the rows' own
        inputs=Schema([TensorSpec(frame[c].to_numpy().dtype, (-1,), c) for c in inputs.columns]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 1))]))
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(MODEL)
    with mlflow.start_run(run_name="bench model, mlflow.tensorflow flavour"):
        info = mlflow.tensorflow.log_model(model, name="model", signature=signature, registered_model_name=MODEL)
    return f"models:/{MODEL}/{info.registered_model_version}"


def filled_inputs(inputs: "DataFrame", spec: FeatureSpec) -> "DataFrame":
    """The inputs with every null replaced by its feature's default, as the UDF fills them: a Keras
    model logged with MLflow's own flavour takes no nulls (a None string fails the whole batch)."""
    from pyspark.sql.functions import coalesce, col, lit

    return inputs.select(*(coalesce(col(c), lit(spec.get(c).default)).alias(c) for c in inputs.columns))


def registered_vs_mlflow(bench: Bench, local_saved_model: str, spec: FeatureSpec, inputs: "DataFrame",
                         query: Callable[..., Callable[[], Sample]], noop: str) -> None:
    """`spec`: the model's; `inputs`: the serving stage's cached rows, the model's inputs;
    `query(function, args, plain=, table=)`: measures one scoring query over a view of them
    (`plain`: the function returns the probability itself); `noop`: the serving stage's no-op
    Arrow UDF. Every query takes the inputs as columns, the one form both UDFs and MLflow's
    signatures accept."""
    import time

    import mlflow
    from pyspark.sql.types import FloatType

    import udfs
    from tfos_jobs.contracts.serving import task_of, udf_return_type
    from tfos_jobs.tracking.registry import resolver

    spark, pr = bench.spark, bench.big.predict
    result_type = udf_return_type(task_of(spec))
    columns = ", ".join(inputs.columns)
    uri = register_bench_model(bench, local_saved_model)
    udfs.register(spark, "bench_registered", f"models:/{MODEL}/1", batch_size=pr.batch_size, resolve=resolver(uri))
    filled = filled_inputs(inputs, spec)
    filled.createOrReplaceTempView("bench_inputs_filled")
    keras = register_keras_flavour(bench, uri, local_saved_model, spec, filled)
    started = time.perf_counter()
    mlflow.pyfunc.load_model(keras)
    bench.run.details[KERAS_LOAD] = Figure("mlflow.pyfunc.load_model of the Keras flavour", "s",
                                           [time.perf_counter() - started])
    bench.run.details[TASKS] = Figure("tasks per scoring query", "tasks", [inputs.rdd.getNumPartitions()])
    spark.udf.register("bench_mlflow_keras", mlflow.pyfunc.spark_udf(
        spark, keras, result_type=FloatType(), env_manager="local"))
    spark.udf.register("bench_mlflow_udf", mlflow.pyfunc.spark_udf(
        spark, f"models:/{MODEL}/1", result_type=result_type, env_manager="local"))
    free = os.path.join(bench.work, "mlflow-free-model")
    mlflow.pyfunc.save_model(free, python_model=FreeModelPyfunc(), artifacts={SAVED_MODEL: local_saved_model})
    spark.udf.register("bench_mlflow_free", mlflow.pyfunc.spark_udf(
        spark, free, result_type=result_type, env_manager="local"))
    out = bench.repeat("registered model", {
        "UDF on models:/": query("bench_registered", columns),
        "mlflow spark_udf, mlflow.tensorflow flavour": query("bench_mlflow_keras", columns, plain=True,
                                                             table="bench_inputs_filled"),
        "mlflow spark_udf": query("bench_mlflow_udf", columns),
        "no-op UDF": query(noop, columns),
        "mlflow spark_udf, free model": query("bench_mlflow_free", columns),
    }, repeats=bench.sizes.serving_repeats)
    bench.run.details[TFOS_PYFUNC] = Figure("mlflow.pyfunc.spark_udf on version 1 (tfos's python_function)",
                                            "rows/s", out["mlflow spark_udf"]["rows_per_sec"])
    bench.run.details[FREE_OURS] = Figure("no-op Arrow UDF", "rows/s", out["no-op UDF"]["rows_per_sec"])
    bench.run.details[FREE_MLFLOW] = Figure("mlflow.pyfunc.spark_udf on tfos's python_function with a free model",
                                            "rows/s", out["mlflow spark_udf, free model"]["rows_per_sec"])
    bench.run.results.append(Result(
        "P12", "SQL UDF on a model registered by tfos (models:/NAME/1) rows/s vs mlflow.pyfunc.spark_udf on the same "
               "trained model registered with mlflow.tensorflow.log_model (models:/NAME/2; same weights, rows, Arrow "
               "batch size, the inputs as columns; MLflow's side gets nulls filled, which it cannot take)",
        Figure("UDF on models:/NAME/1", "rows/s", out["UDF on models:/"]["rows_per_sec"]),
        Figure("mlflow.pyfunc.spark_udf on models:/NAME/2", "rows/s",
               out["mlflow spark_udf, mlflow.tensorflow flavour"]["rows_per_sec"]), 3.0, ">="))
