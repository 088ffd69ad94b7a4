"""The prediction function's arguments, checked when a query is analysed.

A Python UDF cannot see its arguments' types until its tasks run: a call with a column missing would fail in every task,
each retried `spark.task.maxFailures` times. So the SQL name is wrapped through the package's jar
(`tfos.udf.PredictionFunction`): the analyzer calls its builder with the resolved arguments, which checks them against
the model's inputs and raises an AnalysisException naming the function, the missing or mistyped features and the
expected ones, before any task runs, for `spark.sql`, the DataFrame call form and JDBC clients alike.

What each input accepts is what `tfos prepare` accepts for that feature (and a NULL literal, which takes the feature's
default); a sequence feature takes an array of numbers (a window)."""
from __future__ import annotations

import json
import os

from pyspark.sql import SparkSession

from tfos_jobs.features.kinds import accepted_input_types
from tfos_jobs.features.spec import FeatureSpec, SequenceFeature

NULL_TYPE = "void"  # NullType.typeName(): a bare NULL argument


def accepted_types(spec: FeatureSpec, name: str) -> tuple[str, ...]:
    """The Spark types (`PredictionFunction.label`: typeName, arrays as array<element>) that
    the model input `name` accepts."""
    f = spec.get(name)
    if isinstance(f, SequenceFeature):
        return tuple(f"array<{t}>" for t in accepted_input_types(f))
    # An ML Vector reaches a Python function as its struct: pass vector_to_array(v).
    return (*(t for t in accepted_input_types(f) if t != "vector"), NULL_TYPE)


def inputs_json(spec: FeatureSpec) -> str:
    """The model's inputs in order, with their kinds and accepted types: what the check reads."""
    return json.dumps([{"name": n, "kind": spec.get(n).kind, "types": list(accepted_types(spec, n))}
                       for n in spec.model_inputs])


def check_arguments_at_analysis(spark: SparkSession, name: str, spec: FeatureSpec) -> bool:
    """Wrap `name` (already registered by `spark.udf.register`) in the session's function registry with the check of its
    arguments at analysis, through a call on the driver (`driver_calls.UDF_CHECK`), in a classic session and a Spark
    Connect client alike. False when the driver does not have the package's jar: the function then checks its input in
    its tasks."""
    return check_inputs_at_analysis(spark, name, inputs_json(spec))


def check_inputs_at_analysis(spark: SparkSession, name: str, inputs: str) -> bool:
    """`check_arguments_at_analysis` for inputs given as `inputs_json` gives them (any model's)."""
    from tfos_jobs import driver_calls, sessions
    from tfos_jobs.session_builder import TFRECORD_JAR

    for attempt in range(2):
        try:
            driver_calls.call(spark, driver_calls.UDF_CHECK, name=name, inputs=inputs)
            return True
        except driver_calls.MissingJar:
            if attempt or sessions.is_connect(spark) or not os.path.isfile(TFRECORD_JAR):
                return False
            spark.sql(f"ADD JAR '{TFRECORD_JAR}'")  # a session this package did not build: the jar joins it
    return False
