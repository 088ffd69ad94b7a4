"""Task time Spark's own SQL metrics record for the prediction function, over the queries run during a block.

The JVM function's operator times its TensorFlow calls (`TFBatchEvalExec`'s "time scoring in TensorFlow"); a
Python UDF's operator times the Python code its workers run on the batches (Spark's "time to execute Python code").
Summed over every task of every SQL execution (a stream's micro-batches are executions of their own), they say how
much of a run's task time went to scoring, whichever engine scored. Read from the session's SQL status store, which
Spark keeps whether or not its UI runs."""
from __future__ import annotations

import re
from typing import Any

from pyspark.sql import SparkSession

# the metrics' names as Spark shows them: each engine's scoring time
SCORING = ("time scoring in TensorFlow", "time to execute Python code")
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TOTAL = re.compile(r"^\s*([0-9.]+)\s*(ms|s|m|h)\b")


def seconds(formatted: str) -> float:
    """A timing metric's total, from Spark's text for it ("total (min, med, max ...)" then "1.2 s (...)", or
    "850 ms" alone)."""
    lines = formatted.strip().splitlines()
    found = _TOTAL.match(lines[-1] if lines else "")
    if not found:
        raise ValueError(f"not a timing metric's text: {formatted!r}")
    return float(found.group(1)) * _UNITS[found.group(2)]


def _scala_list(jvm: Any, seq: Any) -> list[Any]:
    return list(jvm.scala.jdk.javaapi.CollectionConverters.asJava(seq))


class Executions:
    """The SQL executions started after it was made, and the scoring time their metrics record."""

    def __init__(self, spark: SparkSession):
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a classic session's
        self._jvm = jvm
        self._store = spark._jsparkSession.sharedState().statusStore()
        self._before = {e.executionId() for e in self._executions()}

    def _executions(self) -> list[Any]:
        return _scala_list(self._jvm, self._store.executionsList())

    def scoring_seconds(self) -> float:
        """Task seconds of scoring over the executions since, summed."""
        total = 0.0
        for execution in self._executions():
            if execution.executionId() in self._before:
                continue
            ids = {m.accumulatorId() for m in _scala_list(self._jvm, execution.metrics()) if m.name() in SCORING}
            if not ids:
                continue
            values = self._jvm.scala.jdk.javaapi.CollectionConverters.asJava(
                self._store.executionMetrics(execution.executionId()))
            total += sum(seconds(str(v)) for k, v in values.items() if k in ids)
        return total
