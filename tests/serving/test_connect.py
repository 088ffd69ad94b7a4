"""Spark Connect: a Connect server started without the package's jar cannot serve the prediction
function, and `udfs.register` says what to add, naming the model it was given (its `model_dir`
argument, the caller having named no setting; tests/connect/ serves it from a server that has the
jar)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CLIENT = """
import sys
from pyspark.sql import SparkSession

import udfs
from tfos_jobs.errors import TfosError

spark = SparkSession.builder.remote("local[2]").getOrCreate()  # a local Spark Connect server, without the jar
try:
    print("rows:", spark.range(3).count())  # the client itself works
    udfs.register(spark, "predict_income", sys.argv[1])
except TfosError as e:
    print("refused:", e)
finally:
    spark.stop()
"""


@pytest.mark.slow  # starts a Spark Connect server
def test_udfs_register_on_a_connect_server_without_the_jar_says_what_to_add(setup):
    _, model, _ = setup
    proc = subprocess.run([sys.executable, "-c", CLIENT, str(model)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rows: 3" in proc.stdout
    assert f"refused: model_dir = {str(model)!r}: " in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "does not have the package's jar (tfos-tfrecord.jar)" in proc.stdout
    assert "--jars" in proc.stdout
