"""The prediction function used wrongly, or from a plain interpreter: a wrong call ends before any
task runs with one error line; a notebook's own session gets workers that run its Python."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyspark.errors.exceptions.captured import AnalysisException, PythonException

from tfos_jobs.errors import TfosError
from tfos_jobs.jobs.serve import sql
from tfos_jobs.worker_python import is_local

from tests.conftest import CENSUS, ROOT, census_overrides
from tests.serving.conftest import PEOPLE

TFOS = Path(sys.executable).parent / "tfos"


@pytest.mark.slow  # about 20 s: `make test-all`; `make test` keeps the next one's wrong count and type
def test_tfos_sql_ends_a_wrong_call_with_one_error_line_and_no_task(setup, tmp_path):
    """On a master that retries a failed task 4 times, a struct lacking features ends `tfos sql`
    at analysis: exit 2, one error line naming them, no task started, within seconds."""
    cfg, model, _ = setup
    raw = Path(cfg.sources["people"].path).parent
    sets = census_overrides(raw, tmp_path / "unused", PEOPLE, master="local[2,4]") + [f"predict.model={model}"]
    query = "SELECT person_id, predict_income(struct(age, workclass)).probability AS p FROM features"
    cmd = [str(TFOS), "sql", "--config", str(CENSUS), "-e", query, *[a for s in sets for a in ("--set", s)]]
    stderr_file = tmp_path / "stderr"
    with open(stderr_file, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
                                env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"})
        try:
            registered = None
            for line in proc.stdout:  # the function is registered and the views open: the session is up
                if line.startswith("-- predict_income("):
                    registered = time.monotonic()
            code = proc.wait(timeout=300)
        finally:
            proc.kill()
    stderr = stderr_file.read_text()
    assert registered is not None, stderr[-3000:]
    assert time.monotonic() - registered < 15
    assert code == 2, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("tfos sql: error:")]
    assert errors == [lines[-1]]
    assert "the struct lacks feature(s) fnlwgt, education, education_num" in errors[0]
    assert "predict_income takes the features as 23 arguments in this order: age, workclass" in errors[0]
    assert "Traceback" not in stderr and "TID" not in stderr and "Lost task" not in stderr


def test_tfos_sql_names_a_wrong_count_and_a_wrong_type_in_one_line(spark, setup):
    cfg, model, _ = setup
    with pytest.raises(TfosError) as count:
        sql.run(spark, cfg, "SELECT predict_income(age, workclass) FROM features", model=str(model), log=lambda _: None)
    with pytest.raises(TfosError) as kind:
        sql.run(spark, cfg, "SELECT 1;\nSELECT 2;\n"
                "SELECT predict_income(education, workclass, fnlwgt, age, education_num, marital_status, occupation, "
                "relationship, race, sex, capital_gain, capital_loss, hours_per_week, native_country, region, "
                "income_group, gdp_per_capita, event_count, active_days, ctr, days_since_last, recent_pages, queries) "
                "FROM features",
                model=str(model), log=lambda _: None)
    assert "\n" not in str(count.value) and "\n" not in str(kind.value)
    assert "it was given 2 argument(s). predict_income takes the features as 23 arguments" in str(count.value)
    assert str(kind.value).startswith("statement 3 of 3: ")
    assert ("argument 1 ('age') (numeric feature) has type string, expected one of: byte, short, integer, long, "
            "float, double, decimal, void.") in str(kind.value)
    assert "SQLSTATE" not in str(kind.value)


def test_an_error_line_is_the_message_not_the_traceback(spark):
    worker = PythonException(desc="An exception was thrown from the Python worker. Please see the stack trace below.\n"
                                  "Traceback (most recent call last):\n  File \"udfs/predict.py\", line 240, in _windows\n"
                                  "ValueError: column 'rpm' (sequence feature): the model takes windows of 64 values\n", stackTrace="")
    assert sql.error_line(worker) == "ValueError: column 'rpm' (sequence feature): the model takes windows of 64 values"
    analysis = AnalysisException(desc="[UNRESOLVED_COLUMN] A column `agee` cannot be resolved. SQLSTATE: 42703; "
                                      "line 1 pos 7\n== SQL ==\nSELECT agee", stackTrace="")
    assert sql.error_line(analysis) == "[UNRESOLVED_COLUMN] A column `agee` cannot be resolved. (line 1 pos 7)"


def test_local_masters_are_those_whose_executors_run_here():
    assert all(is_local(m) for m in ("local", "local[2]", "local[*]", "local[2,4]", "local-cluster[2,1,2048]"))
    assert not any(is_local(m) for m in ("yarn", "spark://host:7077", "k8s://https://api:6443", "localhost:7077"))


NOTEBOOK = """
import sys
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
import udfs
from tfos_jobs.errors import ConfigError
from tfos_jobs.worker_python import check_worker_python

spark = SparkSession.builder.master("local[2]").getOrCreate()
people = spark.read.parquet(sys.argv[2])
people.createOrReplaceTempView("people")
predict = udfs.register(spark, "predict_income", sys.argv[1])
print("repr", repr(predict))
row = spark.sql("SELECT count(*) AS n, avg(predict_income(struct(*)).probability) AS p FROM people").first()
print("scored", row.n, row.p)
try:
    people.select(predict("age"))
except AnalysisException as e:
    print("refused", "it was given 1 argument(s)" in str(e))
spark.stop()
spark = SparkSession.builder.master("local[1]").config("spark.pyspark.python", sys.argv[3]).getOrCreate()
try:
    check_worker_python(spark)
except ConfigError as e:
    print("probe", e)
spark.stop()
"""


@pytest.mark.slow  # a notebook-like session of its own: `make test-all`
def test_a_notebook_session_scores_with_its_own_python(setup, tmp_path):
    """`.venv/bin/python` with nothing activated, no PYSPARK_PYTHON, `python3` on PATH a bare
    interpreter: registration gives the workers the notebook's Python, the query scores, a wrong
    call is refused at analysis (the jar added to the session), and a worker Python without the
    package, set by `spark.pyspark.python`, is named at registration time by the probe."""
    cfg, model, features = setup
    rows = tmp_path / "rows"
    features.limit(40).write.parquet(str(rows))
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    venv_bin = str(Path(sys.executable).parent)
    path = [str(bare / "bin"), *(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)]
    env = {k: v for k, v in os.environ.items() if k not in (
        "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME", "TF_USE_LEGACY_KERAS")}
    env["PATH"] = os.pathsep.join(path)
    proc = subprocess.run([sys.executable, "-c", NOTEBOOK, str(model), str(rows), str(bare / "bin" / "python")],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " " in line}
    assert out["repr"].startswith("PredictionUdf(name='predict_income', model=") and out["repr"].endswith("inputs=23)")
    n, p = out["scored"].split()
    assert int(n) == 40 and 0 < float(p) < 1
    assert out["refused"] == "True"
    assert f"({str(bare / 'bin' / 'python')!r}) cannot import tfos_jobs and udfs: ModuleNotFoundError" in out["probe"]
    assert "spark.pyspark.python" in out["probe"] and "tfos pack-env" in out["probe"]
