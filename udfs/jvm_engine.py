"""The prediction function scored inside the executor JVM, with TensorFlow Java (`tfos.udf.jvm` in the package's jar):
no Python worker, no Arrow round trip. Same SQL name, arguments, analysis-time check and result as the Python UDF.

`predict.engine` chooses: "python" (the Arrow UDF in a Python worker), "jvm", or "auto": the JVM when the model loads
there and answers a check batch as the Python UDF does (probabilities within `TOLERANCE`, labels and counters
identical), else the Python UDF, with one line naming why. This module owns the scoring plan the jar reads (its field
names) and the check.

    predict = register(spark, "predict_income", "hdfs:///models/census", engine="auto")
    predict.engine   # "jvm", or "python" with predict.engine_reason
"""
from __future__ import annotations

import json
import logging
import math
import re
from typing import TYPE_CHECKING, Any

from tfos_jobs import driver_calls
from tfos_jobs.config import predict as predict_config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.features.spec import (CategoricalFeature, FeatureSpec, KeyFeature, ListFeature, NumericFeature,
                                     SequenceFeature, TextFeature, VectorFeature)
from tfos_jobs.features.text import PAD
from udfs.argument_check import inputs_json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from udfs.shipping import ShippedModel

Engine, ENGINES = predict_config.Engine, predict_config.ENGINES
TOLERANCE = 1e-5  # the largest difference between the engines' probabilities (or errors, latents) `auto` accepts
CHECK_ROWS = 64  # rows of the check batch
DEFAULT_BATCH = 10_000  # rows per TensorFlow call when the caller gives no batch size
CHECK_PREFIX = "__tfos_jvm_check_"  # the JVM function's name while `auto` checks it
SCORES_IN: dict[str, str] = {"jvm": "scoring in the executor JVM", "python": "scoring in a Python worker"}

log = logging.getLogger("tfos_jobs.predict")


class JvmUnavailable(Exception):
    """Why the JVM cannot score this model here (one line)."""


class PythonUdfFails(Exception):
    """The Python UDF itself failed on the check batch: there is no engine to fall back on (one line)."""


def counted_name(name: str) -> str:
    """The SQL name of the function that returns each batch's counters beside its result (`PredictionUdf.counted`)."""
    return f"{name}__counted"


SERVED = (CategoricalFeature, KeyFeature, NumericFeature, SequenceFeature, VectorFeature, TextFeature, ListFeature)


def unsupported(spec: FeatureSpec) -> str | None:
    """What in the model only the Python UDF prepares, if anything."""
    for name in spec.model_inputs:
        f = spec.get(name)
        if not isinstance(f, SERVED):
            return f"its {f.kind} feature {name!r} is prepared for the model by the Python UDF only"
    return None


def plan_json(spec: FeatureSpec, model: "ShippedModel", *, batch_size: int) -> str:
    """The scoring plan `tfos.udf.jvm.ScoringPlan` reads: where the model is, its inputs in spec order with the
    defaults, cuts, vocabularies and counters of preparation, and how its outputs make the result."""
    from tfos_jobs.contracts.dataset import STATS, VOCAB
    from tfos_jobs.features.standardisation import STATS_PER_ASSET

    vocabularies = {f.name for f in spec.with_vocabulary}
    inputs: list[dict[str, Any]] = []
    for name in spec.model_inputs:
        f = spec.get(name)
        entry: dict[str, Any] = {"name": name, "null_key": contract.count_key(contract.COUNT_NULL, name)}
        if isinstance(f, (CategoricalFeature, KeyFeature)):
            entry.update(kind="string", default_text=getattr(f, "default", ""))
            if isinstance(f, CategoricalFeature) and f.max_length is not None:
                entry.update(max_length=f.max_length, truncated_key=contract.count_key(contract.COUNT_TRUNCATED, name))
            if name in vocabularies:
                entry.update(vocab_file=f"{contract.ASSETS}/{VOCAB}/{name}.txt",
                             unseen_key=contract.count_key(contract.COUNT_UNSEEN, name))
            elif isinstance(f, KeyFeature) and spec.is_sequence:  # an asset outside the train split's is unseen
                entry.update(assets_file=f"{contract.ASSETS}/{STATS}", assets_key=name, assets_field=STATS_PER_ASSET,
                             unseen_key=contract.count_key(contract.COUNT_UNSEEN, name))
        elif isinstance(f, NumericFeature):
            entry.update(kind="number", default_number=float(f.default))
        elif isinstance(f, SequenceFeature):
            entry.update(kind="window", width=spec.time.window, null_key="")
        elif isinstance(f, VectorFeature):
            entry.update(kind="vector", width=f.dim)
        elif isinstance(f, TextFeature):
            entry.update(kind="text", max_length=f.max_tokens, ngrams=f.ngrams, vocab_file=f"{contract.ASSETS}/{VOCAB}/{name}.txt",
                         unseen_key=contract.count_key(contract.COUNT_UNSEEN, name),
                         truncated_key=contract.count_key(contract.COUNT_TRUNCATED, name))
        elif isinstance(f, ListFeature):
            entry.update(kind="list", width=f.max_length, max_length=f.max_length, default_text=PAD,
                         vocab_file=f"{contract.ASSETS}/{VOCAB}/{name}.txt",
                         unseen_key=contract.count_key(contract.COUNT_UNSEEN, name),
                         truncated_key=contract.count_key(contract.COUNT_TRUNCATED, name))
        else:
            raise JvmUnavailable(unsupported(spec))
        inputs.append(entry)
    task = contract.task_of(spec)
    classifier = contract.udf_returns_struct(task) and task != contract.AUTOENCODER
    # categories as distinct values and codes, where the model has that signature and takes nothing else
    codes = [contract.CODES_SIGNATURE, contract.CODES_STRINGS, contract.CODES_CODES, contract.CODES_NUMBERS] \
        if all(entry["kind"] in ("string", "number") for entry in inputs) else []
    return json.dumps({
        "archive": model.archive, "version": model.version, "signature": contract.SERVING_SIGNATURE,
        "task": str(task), "classes": contract.class_names(spec) if classifier else [],
        "fields": list(contract.UDF_FIELDS[task]),
        "outputs": {field: field for field in (*contract.SIGNATURE_OUTPUTS[task], *contract.UDF_FIELDS[task])},
        "inputs": inputs, "rows_key": contract.COUNT_ROWS, "batch_size": batch_size, "codes": codes,
    })


def register_jvm(spark: "SparkSession", name: str, spec: FeatureSpec, model: "ShippedModel", *, batch_size: int) -> None:
    """`name` (and `counted_name(name)`) scoring in the executor JVM, in `spark`'s session (classic or Connect)."""
    try:
        driver_calls.call(spark, driver_calls.UDF_JVM, name=name, counted_name=counted_name(name),
                          plan=plan_json(spec, model, batch_size=batch_size), inputs=inputs_json(spec),
                          value_field=contract.COUNTED_VALUE, counts_field=contract.COUNTED)
    except driver_calls.DriverCallError as e:
        raise JvmUnavailable(_first_line(str(e))) from None


def counts(spark: "SparkSession", name: str) -> dict[str, int]:
    """The JVM function's counters over this session's queries so far."""
    answer = driver_calls.call(spark, driver_calls.UDF_JVM_COUNTS, name=name) or {}
    return {str(k): int(v) for k, v in sorted(answer.items()) if v}


def check_rows(spec: FeatureSpec, vocabularies: dict[str, list[str]], rows: int = CHECK_ROWS) -> tuple[list[tuple], Any]:
    """A batch that walks every rule of preparation: known, unseen, over-long and null categories, numbers with nulls
    and NaN, windows and vectors of varied values, a null vector. Deterministic."""
    from pyspark.sql.types import ArrayType, DoubleType, StringType, StructField, StructType

    fields: list[Any] = []
    columns: list[list[Any]] = []
    for name in spec.model_inputs:
        f = spec.get(name)
        if isinstance(f, (CategoricalFeature, KeyFeature)):
            known = vocabularies.get(name) or ["a"]
            long = (known[0] * 50)[:200] if known[0] else "x" * 200
            cycle: list[Any] = [*known[:rows - 4], "never seen in training", None, long, "7"]
            fields.append(StructField(name, StringType()))
            columns.append([cycle[i % len(cycle)] for i in range(rows)])
        elif isinstance(f, NumericFeature):
            cycle = [None, math.nan, 0.0, float(f.default), -3.5, 1e6, 12.25, 0.001]
            fields.append(StructField(name, DoubleType()))
            columns.append([cycle[i % len(cycle)] if i < len(cycle) else (i * 7.3) % 101 - 20 for i in range(rows)])
        elif isinstance(f, TextFeature):
            known = vocabularies.get(name) or ["word"]
            cycle = [None, "", " ".join(known[:3]), "Ünïcödé, words!  " + " ".join(known[:2]), "never-seen tokens here",
                     " ".join(known * 20)[:2000], "MiXeD CaSe " + (known[-1] if known else "")]
            fields.append(StructField(name, StringType()))
            columns.append([cycle[i % len(cycle)] for i in range(rows)])
        elif isinstance(f, ListFeature):
            known = vocabularies.get(name) or ["a"]
            cycle = [None, [], known[:2], [known[0], None, "", "never seen"], (known * 10)[:f.max_length + 3]]
            fields.append(StructField(name, ArrayType(StringType())))
            columns.append([cycle[i % len(cycle)] for i in range(rows)])
        elif isinstance(f, (SequenceFeature, VectorFeature)):
            width = spec.time.window if isinstance(f, SequenceFeature) else f.dim
            fields.append(StructField(name, ArrayType(DoubleType())))
            columns.append([None if isinstance(f, VectorFeature) and i == 3 else
                            [math.sin(i * 0.37 + k * 0.11) * (1 + i % 5) for k in range(width)] for i in range(rows)])
    return list(zip(*columns)), StructType(fields)


def compare(python: list[Any], jvm: list[Any], task: str) -> str | None:
    """Where the JVM's results differ from the Python UDF's on the check batch, if anywhere (one line)."""
    for i, (p, j) in enumerate(zip(python, jvm)):
        if not contract.udf_returns_struct(task):
            if not _close(p, j):
                return f"row {i}: value {j} where the Python UDF gives {p}"
            continue
        for field in contract.UDF_FIELDS[task]:
            a, b = p[field], j[field]
            same = (all(_close(x, y) for x, y in zip(a, b)) and len(a) == len(b)) if isinstance(a, list) else \
                _close(a, b) if isinstance(a, float) else a == b
            if not same:
                return f"row {i}: {field} {b!r} where the Python UDF gives {a!r}"
    return None


def check_batch(spark: "SparkSession", spec: FeatureSpec, vocabularies: dict[str, list[str]], python_counted: Any,
                jvm_counted: str) -> str | None:
    """The JVM function on a check batch, in a query on the executors (it loads the model there), beside the Python
    UDF unless `python_counted` is None: what differs, if anything. Raises JvmUnavailable when the JVM fails,
    PythonUdfFails when the Python UDF does."""
    from pyspark.errors import PythonException
    from pyspark.sql import functions as F

    rows, schema = check_rows(spec, vocabularies)
    df = spark.createDataFrame(rows, schema).repartition(1)
    cols = [F.col(n) for n in spec.model_inputs]
    sides = [F.call_function(jvm_counted, *cols).alias("j")]
    if python_counted is not None:
        sides.append(python_counted(*cols).alias("p"))
    try:
        got = df.select(*sides).collect()
    except PythonException as e:  # the Python side failed: no engine to fall back on
        raise PythonUdfFails(f"the Python UDF fails on the check batch: {_python_cause(str(e))}") from None
    except Exception as e:  # the model does not load or run in TensorFlow Java (an op its runtime lacks)
        raise JvmUnavailable(f"it fails on the check batch: {_cause(str(e))}") from None
    if python_counted is None:
        return None
    task = contract.task_of(spec)
    value, counted = contract.COUNTED_VALUE, contract.COUNTED
    differs = compare([r["p"][value] for r in got], [r["j"][value] for r in got], task)
    if differs:
        return differs
    totals = [_summed(r[side][counted] for r in got) for side in ("p", "j")]
    if totals[0] != totals[1]:
        keys = sorted(k for k in set(totals[0]) | set(totals[1]) if totals[0].get(k) != totals[1].get(k))
        return "counters differ: " + ", ".join(f"{k} {totals[1].get(k, 0)} vs {totals[0].get(k, 0)}" for k in keys)
    return None


def _summed(maps: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in maps:
        for k, v in (m or {}).items():
            out[k] = out.get(k, 0) + int(v)
    return {k: v for k, v in out.items() if v}


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= TOLERANCE * max(1.0, abs(float(a)))


def _cause(message: str) -> str:
    """The innermost error of a failed query's message: TensorFlow's own line where there is one."""
    if any(f"{kind}: org{sep}tensorflow{sep}" in message for kind in ("NoClassDefFoundError", "ClassNotFoundException")
           for sep in "/."):
        return NO_TFJAVA_ON_EXECUTORS
    lines = [s.strip() for s in message.splitlines() if s.strip()]
    found = [s for s in lines if "Op type not registered" in s or "TFRuntimeException" in s or "TensorFlowException" in s]
    caused = [s for s in lines if s.startswith("Caused by:")]
    return _first_line((found or caused or lines or [message])[0].removeprefix("Caused by: "))[:400]


NO_TFJAVA_ON_EXECUTORS = (
    "the executors do not have TensorFlow Java's classes: a Spark Connect client's session sees only the jars its "
    "server started with (start it with `tfos connect-server`, or give spark-submit --jars the jars of "
    "tfos_jobs/jars/tfjava beside the package's jar)")


def _python_cause(message: str) -> str:
    """The last error line of a Python worker's traceback."""
    lines = [s.strip() for s in message.splitlines() if re.match(r"^[A-Za-z_.]*(Error|Exception): ", s.strip())]
    return (lines[-1] if lines else _first_line(message))[:400]


def _first_line(message: str) -> str:
    line = next((s for s in message.splitlines() if s.strip()), message)
    return line.split(": ", 1)[1] if line.startswith(("java.", "scala.", "org.")) and ": " in line else line


def vocabularies(spec: FeatureSpec, local_dir: str) -> dict[str, list[str]]:
    """The values the check batch draws its known categories (or assets) from, read from the driver's copy."""
    import os

    out: dict[str, list[str]] = {}
    for name in spec.model_inputs:
        f = spec.get(name)
        path = contract.vocab_asset(local_dir, name)
        if isinstance(f, (CategoricalFeature, TextFeature, ListFeature)) and os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                out[name] = fh.read().splitlines()[:32]
        elif isinstance(f, KeyFeature) and spec.is_sequence:
            from udfs.predict import trained_assets

            out[name] = trained_assets(local_dir, spec)[:32]
    return out
