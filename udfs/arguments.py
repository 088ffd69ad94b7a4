"""The prediction function's arguments, checked when a query is analysed.

A Python UDF cannot see its arguments' types until its tasks run: a call with a column missing
would fail in every task, each retried `spark.task.maxFailures` times. So the SQL name is
registered through the package's jar (`tfos.udf.PredictionFunction`): the analyzer calls its
builder with the resolved arguments, which checks them against the model's inputs and raises
an AnalysisException naming the function, the missing or mistyped features and the expected
ones, before any task runs, for `spark.sql`, the DataFrame call form and JDBC clients alike.

What each input accepts is what `tfos prepare` accepts for that feature (and a NULL literal,
which takes the feature's default); a sequence feature takes an array of numbers (a window).
"""
from __future__ import annotations

import json
import os
from typing import Any

from pyspark.sql import SparkSession

from tfos_jobs.features.kinds import accepted_input_types
from tfos_jobs.features.spec import FeatureSpec, SequenceFeature

CHECK_CLASS = "tfos.udf.PredictionFunction"
NULL_TYPE = "void"  # NullType.typeName(): a bare NULL argument


def accepted_types(spec: FeatureSpec, name: str) -> tuple[str, ...]:
    """The Spark types (`PredictionFunction.label`: typeName, arrays as array<element>) that
    the model input `name` accepts."""
    f = spec.get(name)
    if isinstance(f, SequenceFeature):
        return tuple(f"array<{t}>" for t in accepted_input_types(f))
    return (*accepted_input_types(f), NULL_TYPE)


def inputs_json(spec: FeatureSpec) -> str:
    """The model's inputs in order, with their kinds and accepted types: what the check reads."""
    return json.dumps([{"name": n, "kind": spec.get(n).kind, "types": list(accepted_types(spec, n))}
                       for n in spec.model_inputs])


def register_checked(spark: SparkSession, name: str, registered_udf: Any, spec: FeatureSpec) -> bool:
    """Re-register `name` (already registered by `spark.udf.register`, which returned
    `registered_udf`) with its arguments checked at analysis. False when the package's jar is
    not in this session and cannot be added: the function then checks its input in its tasks."""
    check = _check_class(spark)
    if check is None:
        return False
    # `_judf` is the UDF's JVM half (pyspark's UserDefinedPythonFunction), the same object
    # spark.udf.register put in the function registry.
    check.register(spark._jsparkSession, name, registered_udf._judf, inputs_json(spec))
    return True


def _check_class(spark: SparkSession) -> Any:
    """The check's JVM class: on the class path when the session was built by this package;
    else the jar is added to the session (`ADD JAR`, which also makes the class visible to the
    calling thread). None when there is no jar to add."""
    from py4j.java_gateway import JavaClass

    from tfos_jobs.session import TFRECORD_JAR

    def lookup() -> Any:
        found = spark._jvm
        for part in CHECK_CLASS.split("."):
            found = getattr(found, part)
        return found if isinstance(found, JavaClass) else None

    if (found := lookup()) is not None or not os.path.isfile(TFRECORD_JAR):
        return found
    spark.sql(f"ADD JAR '{TFRECORD_JAR}'")
    return lookup()
