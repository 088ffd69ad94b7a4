"""GPU inference: in a Spark task, the model loader shows TensorFlow only the GPUs Spark gave
that task (a fake discovery script offers them), and none to a task that got none."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

# Calls udfs.predict.use_task_gpus (what Scorer does before it imports TensorFlow) inside
# real Spark tasks and reports what the task was given next to what TensorFlow would see.
SCRIPT = textwrap.dedent("""
    import json, os, sys
    from typing import Iterator
    import pandas as pd
    from pyspark import TaskContext
    from pyspark.sql.functions import pandas_udf
    from tfos_jobs import session_builder
    from tfos_jobs.config import SparkConfig

    master, gpus = sys.argv[1], sys.argv[2] == "gpus"
    conf = {"spark.ui.enabled": "false"}
    if gpus:
        script = sys.argv[3]
        conf.update({"spark.worker.resource.gpu.amount": "2", "spark.worker.resource.gpu.discoveryScript": script,
                     "spark.executor.resource.gpu.amount": "2", "spark.executor.resource.gpu.discoveryScript": script,
                     "spark.task.resource.gpu.amount": "1"})
    spark = session_builder.build(SparkConfig(master=master, conf=conf))

    @pandas_udf("string")
    def seen(batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
        from udfs.predict import use_task_gpus
        use_task_gpus()
        resources = TaskContext.get().resources()
        given = ",".join(resources["gpu"].addresses) if "gpu" in resources else ""
        for x in batches:
            yield pd.Series([f"{given}|{os.environ.get('CUDA_VISIBLE_DEVICES')}"] * len(x))

    out = spark.range(8).repartition(2).select(seen("id").alias("seen")).collect()
    print("SEEN", json.dumps(sorted({r.seen for r in out})))
""")


def run(master: str, mode: str, tmp_path, *extra: str) -> list[list[str]]:
    script = tmp_path / f"gpu_{mode}.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), master, mode, *extra], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env={**os.environ, "PYSPARK_PYTHON": sys.executable,
                                                      "PYTHONPATH": str(ROOT), "TFOS_FAKE_GPU_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SEEN "))
    return [s.split("|") for s in json.loads(line[5:])]


def test_tasks_with_gpus_see_only_theirs(tmp_path):
    seen = run("local-cluster[1,2,1536]", "gpus", tmp_path, str(ROOT / "tests" / "cluster" / "fake_gpu_discovery.sh"))
    assert seen and all(given in ("0", "1") and visible == given for given, visible in seen)


@pytest.mark.slow  # about 12 s: `make test-all`; `make test` keeps the tasks with GPUs
def test_tasks_without_gpus_see_none(tmp_path):
    assert run("local[2]", "cpu", tmp_path) == [["", ""]]
