"""Driver side of the prediction UDF: check a model directory, then register it for SQL.

    from udfs import register
    predict = register(spark, "predict_income", "hdfs:///models/census")
    spark.sql("SELECT *, predict_income(struct(*)) AS p FROM people_features")
    predict.counts()   # rows scored, nulls filled and unseen categories, per feature

The model may be on any filesystem the session reaches, or a version in a model registry
(`models:/census@champion`) that `resolve` turns into a local directory (MLflow's:
`tfos_jobs.tracking.registry.resolver`; serving does not depend on MLflow); it is fetched to the
driver once per version, checked there before any query runs (its SavedModel and signatures, the feature spec
and vocabularies in its assets), and shipped to every executor once (`udfs.shipping`).
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from pyspark import AccumulatorParam
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import ArrowUDFType, arrow_udf, call_function
from tfos_jobs import sessions
from tfos_jobs.contracts import serving as contract
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.storage import Storage, StorageError, named
from tfos_jobs.tf_import import tensorflow
from tfos_jobs.worker_python import check_worker_python
from udfs import arguments, shipping
from udfs.predict import make_udf_function


# (a model reference, the setting that names it) -> the reference itself when it is a path, else
# the local directory of the registered version it names.
Resolver = Callable[[str, str], str]


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

    def __call__(self, *cols: Column | str) -> Column:
        """The function on DataFrame columns: the features in spec order, or none for all of them.
        Passed as arguments, not as one struct: Spark then builds no struct per row. Called by
        its registered name, so the arguments are checked when the DataFrame is analysed."""
        return call_function(self.name, *(cols or self.spec.model_inputs))

    def counted(self, df: DataFrame, column: str) -> tuple[DataFrame, Observation]:
        """`df` with the prediction as `column`, and an observation that holds this query's
        counters once an action has run over the result (`counts_of`): what a query of a Spark
        Connect client has in place of `counts`."""
        hidden = f"__{column}_counted"
        seen = Observation()
        scored = df.withColumn(hidden, self.counting(*self.spec.model_inputs))
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
        if self.counter is None:
            raise TfosError(f"{self.name}: the counters of a function registered from a Spark Connect client are not "
                            "kept across queries (Spark Connect has no accumulators); `tfos predict` observes them "
                            "in its own query and writes them to its report")
        return dict(sorted(self.counter.value.items()))

    def __repr__(self) -> str:
        return (f"PredictionUdf(name={self.name!r}, model={self.export_dir!r}, version={self.version!r}, "
                f"inputs={len(self.spec.model_inputs)})")


def resolve_export_dir(storage: Storage, model_dir: str, setting: str = "predict.model",
                       resolve: Resolver | None = None) -> str:
    """The SavedModel directory, qualified: `model_dir` itself or its `saved_model/`, or the
    local copy of the registered version `resolve` finds for it. Refuses anything else, naming `setting`."""
    if resolve is not None:
        model_dir = resolve(model_dir, setting)
    if not model_dir or "\0" in model_dir:
        raise ConfigError(f"{setting}: {model_dir!r} is not a valid path")
    with named(setting, model_dir):
        path = storage.qualify(model_dir)
        for candidate in (path, f"{path}/saved_model"):
            if storage.exists(f"{candidate}/{contract.SAVED_MODEL_FILE}"):
                return candidate
        exists = storage.exists(path)
    if not exists:
        raise ConfigError(f"{setting}: model directory {model_dir!r} does not exist")
    raise ConfigError(f"{setting}: {model_dir!r} holds no SavedModel (no {contract.SAVED_MODEL_FILE} in it or in its "
                      "saved_model/)")


def model_spec(storage: Storage, export_dir: str) -> FeatureSpec:
    """The feature spec in a model's assets, read where the model is."""
    path = contract.spec_asset(export_dir)
    try:
        return FeatureSpec.from_json(storage.read_text(path))
    except StorageError:
        raise ConfigError(f"{export_dir!r} has no {path[len(export_dir) + 1:]}: it was not exported by "
                          "tfos train") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path!r} is not a valid feature spec: {e}") from None


def served_spec(spark: SparkSession, model_dir: str, setting: str = "predict.model",
                resolve: Resolver | None = None) -> FeatureSpec:
    """The feature spec of the model in `model_dir`, wherever it is, without loading the model."""
    storage = Storage(spark)
    return model_spec(storage, resolve_export_dir(storage, model_dir, setting, resolve))


def served_version(spark: SparkSession, model_dir: str, setting: str = "predict.model",
                   resolve: Resolver | None = None) -> str:
    """What `register` would serve for `model_dir` now (the SavedModel's place and version), read
    without loading it: a new export, or an alias moved to another version, changes it."""
    storage = Storage(spark)
    export_dir = resolve_export_dir(storage, model_dir, setting, resolve)
    with named(setting, model_dir):
        return shipping.version_of(storage, export_dir)


def check_model(local_dir: str, export_dir: str) -> FeatureSpec:
    """Load the model once on the driver (its local copy): a missing spec, a corrupt graph or
    a missing signature fails here, naming `export_dir`, instead of in every task of a query."""
    spec_path = contract.spec_asset(local_dir)
    try:
        with open(spec_path, encoding="utf-8") as fh:
            spec = FeatureSpec.from_json(fh.read())
    except FileNotFoundError:
        raise ConfigError(f"{export_dir!r} has no {os.path.relpath(spec_path, local_dir)}: it was not exported by "
                          "tfos train") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{contract.spec_asset(export_dir)!r} is not a valid feature spec: {e}") from None
    missing = [f.name for f in spec.categorical if not os.path.isfile(contract.vocab_asset(local_dir, f.name))]
    if missing:
        where = os.path.dirname(os.path.relpath(contract.vocab_asset(local_dir, missing[0]), local_dir))
        raise ConfigError(f"{export_dir!r} lacks vocabularies for {missing} in {where}/")
    tf = tensorflow()
    try:
        signatures = tf.saved_model.load(local_dir).signatures
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
    return spec


def register_in(spark: SparkSession, udf: PredictionUdf) -> PredictionUdf:
    """`udf` under its name in another session (such as the copy a streaming query runs in),
    the model already fetched and shipped."""
    registered = spark.udf.register(udf.name, udf.udf)
    return dataclasses.replace(udf, udf=registered,
                               checked=arguments.register_checked(spark, udf.name, udf.spec))


def register(spark: SparkSession, name: str, model_dir: str, *, batch_size: int | None = None,
             setting: str = "predict.model", resolve: Resolver | None = None) -> PredictionUdf:
    """Register `name` as a SQL function scoring with the model in `model_dir` (any filesystem
    the session reaches, or a registered model `models:/NAME@alias` that `resolve` finds; errors
    name `setting`). Its arguments are checked when a query is analysed, and the executors'
    Python is checked (or, on a local master, chosen) here, not at the first query. From a Spark
    Connect client the function is registered in the client's session, and the model reaches the
    executors as a session artifact; its counters are then those `tfos predict` observes."""
    check_worker_python(spark)
    storage = Storage(spark)
    export_dir = resolve_export_dir(storage, model_dir, setting, resolve)
    with named(setting, model_dir):
        version = shipping.version_of(storage, export_dir)
        local_dir = shipping.fetch(storage, export_dir, version)
    spec = check_model(local_dir, export_dir)
    model = shipping.ship(spark, local_dir, version)
    if batch_size:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_size))
    counter = None if sessions.is_connect(spark) else spark.sparkContext.accumulator({}, CounterParam())
    with warnings.catch_warnings():  # one function serves both call forms (args or a struct), which type hints cannot express
        warnings.simplefilter("ignore", UserWarning)
        # pyspark's overloads allow only atomic and array results for SCALAR_ITER; a struct works as well
        udf = arrow_udf(make_udf_function(model, counter),  # type: ignore[call-overload]
                        contract.udf_return_type(contract.task_of(spec)), ArrowUDFType.SCALAR_ITER)
        counting = arrow_udf(make_udf_function(model, None, counted=True),  # type: ignore[call-overload]
                             contract.counted_return_type(contract.task_of(spec)), ArrowUDFType.SCALAR_ITER)
    registered = spark.udf.register(name, udf)
    checked = arguments.register_checked(spark, name, spec)
    return PredictionUdf(name, export_dir, local_dir, spec, registered, counter, version, checked, counting)
