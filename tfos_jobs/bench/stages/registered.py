"""P12: a registered model served by this package's UDF (`models:/NAME/1`) against MLflow's own
`mlflow.pyfunc.spark_udf` on the same registered version: same rows, Arrow batch size and call
form (`struct(*)`). The MLflow model's python_function scores with the UDF's own Scorer, kept
once per Python worker as the UDF keeps it, so the difference is the way each UDF runs in
Spark, not the model code.

Beside it, both sides with a model that costs nothing (the no-op Arrow UDF; tfos's
python_function with a scorer that returns constants, its conversions kept). Both sides pay
the same model on every row, so P12 = (MLflow's fixed cost + model) ÷ (ours + model) falls as
the model costs more, and the ratio of the two free sides is the most P12 can be."""
from __future__ import annotations

import os
import tempfile
from typing import Callable

import mlflow.pyfunc
import pyarrow as pa

from tfos_jobs.bench import scoring
from tfos_jobs.bench.context import Bench
from tfos_jobs.bench.harness import Figure, Result, Sample
from tfos_jobs.tracking.pyfunc_model import SAVED_MODEL, SavedModelPyfunc

MODEL = "bench"
FREE_OURS = "P12 free model ours"  # run.details keys, read by bench.report
FREE_MLFLOW = "P12 free model mlflow"


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
    os.makedirs(store, exist_ok=True)
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


def registered_vs_mlflow(bench: Bench, local_saved_model: str, task: str,
                         query: Callable[[str], Callable[[], Sample]], noop: str) -> None:
    """`query(function)`: measures one scoring query over the serving stage's cached rows;
    `noop`: the serving stage's no-op Arrow UDF."""
    import mlflow

    import udfs
    from tfos_jobs.contracts.serving import udf_return_type

    spark, pr = bench.spark, bench.big.predict
    uri = register_bench_model(bench, local_saved_model)
    udfs.register(spark, "bench_registered", f"models:/{MODEL}/1", batch_size=pr.batch_size, tracking_uri=uri)
    mlflow.set_tracking_uri(uri)
    spark.udf.register("bench_mlflow_udf", mlflow.pyfunc.spark_udf(
        spark, f"models:/{MODEL}/1", result_type=udf_return_type(task), env_manager="local"))
    free = os.path.join(bench.work, "mlflow-free-model")
    mlflow.pyfunc.save_model(free, python_model=FreeModelPyfunc(), artifacts={SAVED_MODEL: local_saved_model})
    spark.udf.register("bench_mlflow_free", mlflow.pyfunc.spark_udf(
        spark, free, result_type=udf_return_type(task), env_manager="local"))
    out = bench.repeat("registered model", {
        "UDF on models:/": query("bench_registered"),
        "mlflow spark_udf": query("bench_mlflow_udf"),
        "no-op UDF": query(noop),
        "mlflow spark_udf, free model": query("bench_mlflow_free"),
    }, repeats=bench.sizes.serving_repeats)
    bench.run.details[FREE_OURS] = Figure("no-op Arrow UDF, struct(*)", "rows/s", out["no-op UDF"]["rows_per_sec"])
    bench.run.details[FREE_MLFLOW] = Figure("mlflow.pyfunc.spark_udf on tfos's python_function with a free model",
                                            "rows/s", out["mlflow spark_udf, free model"]["rows_per_sec"])
    bench.run.results.append(Result(
        "P12", "SQL UDF on a registered model (models:/NAME/1) rows/s vs mlflow.pyfunc.spark_udf on the same "
               "version (same rows, Arrow batch size, struct(*) call)",
        Figure("UDF on models:/", "rows/s", out["UDF on models:/"]["rows_per_sec"]),
        Figure("mlflow.pyfunc.spark_udf", "rows/s", out["mlflow spark_udf"]["rows_per_sec"]), 3.0, ">="))
