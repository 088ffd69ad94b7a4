"""Driver side of the prediction UDF: a model located, fetched and checked on the driver, shipped
to the executors and registered for SQL; the function registered, with the counters of what it met.

    from udfs import register
    predict = register(spark, "predict_income", "hdfs:///models/census")
    spark.sql("SELECT *, predict_income(struct(*)) AS p FROM people_features")
    predict.counts()   # rows scored, nulls filled and unseen categories, per feature
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, overload

from pyspark import AccumulatorParam
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import ArrowUDFType, arrow_udf, call_function

from tfos_jobs import sessions
from tfos_jobs.contracts import serving as contract
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.storage import Storage, named
from tfos_jobs.worker_python import check_worker_python
from udfs import jvm_engine, shipping
from udfs.argument_check import check_arguments_at_analysis
from udfs.model_location import Resolver, locate_saved_model, read_spec_asset, version_of
from udfs.predict import make_udf_function
from udfs.saved_model_check import check_saved_model
from udfs.signature_udf import SignatureUdf, register_signature


class CounterParam(AccumulatorParam):
    """Sums dicts of counts: how many rows, nulls and unseen categories the UDF met."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        for key, n in b.items():
            a[key] = a.get(key, 0) + n
        return a


@dataclass(repr=False)
class PredictionUdf:
    """A registered prediction function: call it on DataFrame columns, or by `name` in SQL."""

    name: str
    export_dir: str  # where the SavedModel is (qualified)
    local_dir: str  # its copy on the driver's disk
    spec: FeatureSpec
    udf: Any
    counter: Any
    version: str = ""  # the model's version (`served_version`): a new export or alias target changes it
    checked: bool = False  # whether the analyzer checks its arguments (the package's jar is in the session)
    counting: Any = None  # the same function with each batch's counters beside its result (`counted`)
    batch_size: int | None = None  # rows per call of the model (None: each Arrow batch)
    engine: str = "python"  # where it scores: "python" (an Arrow UDF) or "jvm" (`udfs.jvm_engine`)
    engine_reason: str = ""  # why `auto` chose the Python UDF
    spark: Any = None  # the session it is registered in (the JVM function's counters are read there)

    def __call__(self, *cols: Column | str) -> Column:
        """The function on DataFrame columns: the features in spec order, or none for all of them.
        Passed as arguments, not as one struct: Spark then builds no struct per row. Called by
        its registered name, so the arguments are checked when the DataFrame is analysed."""
        return call_function(self.name, *(cols or self.spec.model_inputs))

    def counted(self, df: DataFrame, column: str) -> tuple[DataFrame, Observation]:
        """`df` with the prediction as `column`, and an observation that holds this query's counters once an action has
        run over the result (`counts_of`): what a query of a Spark Connect client has in place of `counts`."""
        hidden = f"__{column}_counted"
        seen = Observation()
        counting = self.counting if self.engine == "python" else \
            (lambda *cols: call_function(jvm_engine.counted_name(self.name), *cols))
        scored = df.withColumn(hidden, counting(*self.spec.model_inputs))
        counters = F.col(hidden)[contract.COUNTED]
        totals = [F.sum(F.coalesce(counters[k], F.lit(0))).alias(k) for k in contract.count_keys(self.spec)]
        out = scored.observe(seen, *totals).withColumn(column, F.col(f"{hidden}.{contract.COUNTED_VALUE}"))
        return out.drop(hidden), seen

    @staticmethod
    def counts_of(seen: Observation) -> dict[str, int]:
        """The counters an observation from `counted` holds (those above zero)."""
        return {k: int(v) for k, v in sorted(seen.get.items()) if v}

    def counts(self) -> dict[str, int]:
        """Totals so far over every query that used this UDF (updated when a query finishes)."""
        if self.engine == "jvm":
            return jvm_engine.counts(self.spark, self.name)
        if self.counter is None:
            raise TfosError(f"{self.name}: the counters of a function registered from a Spark Connect client are not "
                            "kept across queries (Spark Connect has no accumulators); `tfos predict` observes them "
                            "in its own query and writes them to its report")
        return dict(sorted(self.counter.value.items()))

    def __repr__(self) -> str:
        return (f"PredictionUdf(name={self.name!r}, model={self.export_dir!r}, version={self.version!r}, "
                f"inputs={len(self.spec.model_inputs)}, engine={self.engine!r})")


def register_in(spark: SparkSession, udf: PredictionUdf) -> PredictionUdf:
    """`udf` under its name in `spark` (as well: a streaming query runs in a copy of the session)."""
    registered = spark.udf.register(udf.name, udf.udf)
    udf = dataclasses.replace(udf, udf=registered, checked=check_arguments_at_analysis(spark, udf.name, udf.spec),
                              spark=spark)
    if udf.engine == "jvm":
        model = shipping.ShippedModel(shipping.archive_name(udf.version), udf.version)
        jvm_engine.register_jvm(spark, udf.name, udf.spec, model, batch_size=udf.batch_size or jvm_engine.DEFAULT_BATCH)
    return udf


def choose_engine(spark: SparkSession, udf: PredictionUdf, model: shipping.ShippedModel, engine: str,
                  setting: str) -> PredictionUdf:
    """`udf` scoring in the JVM (engine "jvm", or "auto" once the check batch agrees), else as it is, with the reason."""
    if engine == "python":
        return udf
    batch = udf.batch_size or jvm_engine.DEFAULT_BATCH
    try:
        reason = jvm_engine.unsupported(udf.spec)
        if reason is not None:
            raise jvm_engine.JvmUnavailable(reason)
        # the JVM function on a check batch under another name first: loaded on the executors, and with "auto"
        # compared with the Python UDF, before it takes the name
        probe = f"{jvm_engine.CHECK_PREFIX}{udf.name}"
        jvm_engine.register_jvm(spark, probe, udf.spec, model, batch_size=batch)
        vocabularies = jvm_engine.vocabularies(udf.spec, udf.local_dir)
        differs = jvm_engine.check_batch(spark, udf.spec, vocabularies, udf.counting if engine == "auto" else None,
                                         jvm_engine.counted_name(probe))
        if differs is not None:
            raise jvm_engine.JvmUnavailable(f"its answer to the check batch differs from the Python UDF's: {differs}")
        jvm_engine.register_jvm(spark, udf.name, udf.spec, model, batch_size=batch)
    except jvm_engine.PythonUdfFails as e:
        raise ConfigError(f"{setting}: {udf.export_dir!r} cannot be scored: {e}") from None
    except jvm_engine.JvmUnavailable as e:
        if engine == "jvm":
            raise ConfigError(f"{setting}: engine 'jvm' cannot score {udf.export_dir!r}: {e}") from None
        jvm_engine.log.warning("%s scores in a Python worker: the JVM cannot score this model: %s", udf.name, e)
        return dataclasses.replace(udf, engine_reason=str(e))
    return dataclasses.replace(udf, engine="jvm")


@overload
def register(spark: SparkSession, name: str, model_dir: str, *, batch_size: int | None = None,
             setting: str = "model_dir", resolve: Resolver | None = None, engine: str = "python") -> PredictionUdf: ...


@overload
def register(spark: SparkSession, name: str, model_dir: str, *, signature: str, batch_size: int | None = None,
             setting: str = "model_dir", resolve: Resolver | None = None) -> SignatureUdf: ...


def register(spark: SparkSession, name: str, model_dir: str, *, signature: str | None = None,
             batch_size: int | None = None, setting: str = "model_dir",
             resolve: Resolver | None = None, engine: str = "python") -> PredictionUdf | SignatureUdf:
    """Register `name` as a SQL function scoring with the model in `model_dir` (any filesystem the session reaches, or
    `models:/NAME@alias` that `resolve` finds; errors name `setting`, the caller's name for it) on `batch_size` rows per
    call (default: each Arrow batch), whatever the session's other functions use. Its arguments are checked when a query
    is analysed, the executors' Python here. From a Spark Connect client it is registered in the client's session, the
    model reaches the executors as an artifact, and its counters are those `tfos predict` observes.

    With `signature`, any SavedModel (saved by TensorFlow, tf-keras or Keras 3's `export`) is served by that signature:
    its inputs are the arguments, by name, and its outputs the result struct (`udfs.signature_udf`).

    `engine`: where it scores (`udfs.jvm_engine`): "python", "jvm" (inside the executor JVM, by TensorFlow Java), or
    "auto" (the JVM when it answers a check batch as the Python UDF does, else Python, saying why)."""
    if engine not in jvm_engine.ENGINES:
        raise ConfigError(f"{setting}: engine {engine!r} is not one of {', '.join(jvm_engine.ENGINES)}")
    if engine != "jvm":  # scoring in the JVM needs no Python on the executors
        check_worker_python(spark)
    storage = Storage(spark)
    export_dir = locate_saved_model(storage, model_dir, setting=setting, resolve=resolve)
    if signature is not None:
        if engine == "jvm":
            raise ConfigError(f"{setting}: engine 'jvm' scores models tfos train exported (their feature spec says how "
                              "to prepare each input); a SavedModel served by its signature scores in a Python worker: "
                              "leave engine as \"python\" or \"auto\"")
        return register_signature(spark, name, export_dir, signature=signature, setting=setting,
                                  counter_param=CounterParam(), batch_size=batch_size)
    if not storage.exists(contract.spec_asset(export_dir)):
        raise ConfigError(f"{setting}: {export_dir!r} has no {contract.spec_asset(export_dir)[len(export_dir) + 1:]}: "
                          "it was not exported by tfos train; register(..., signature=\"serving_default\") serves any "
                          "SavedModel by one of its signatures")
    spec = read_spec_asset(storage, export_dir)
    with named(setting, model_dir):
        version = version_of(storage, export_dir)
        local_dir = shipping.fetch(storage, export_dir, version)
    check_saved_model(spec, local_dir, export_dir)
    model = shipping.ship(spark, local_dir, version)
    counter = None if sessions.is_connect(spark) else spark.sparkContext.accumulator({}, CounterParam())
    with warnings.catch_warnings():  # one function serves both call forms (args or a struct), which type hints cannot express
        warnings.simplefilter("ignore", UserWarning)
        # pyspark's overloads allow only atomic and array results for SCALAR_ITER; a struct works as well
        udf = arrow_udf(make_udf_function(model, counter, batch_size),  # type: ignore[call-overload]
                        contract.udf_return_type(contract.task_of(spec)), ArrowUDFType.SCALAR_ITER)
        counting = arrow_udf(make_udf_function(model, None, batch_size, counted=True),  # type: ignore[call-overload]
                             contract.counted_return_type(contract.task_of(spec)), ArrowUDFType.SCALAR_ITER)
    registered = register_in(spark, PredictionUdf(name, export_dir, local_dir, spec, udf, counter, version,
                                                  counting=counting, batch_size=batch_size))
    return choose_engine(spark, registered, model, engine, setting)
