"""`tfos bench --smoke` end to end: the harness runs every stage and writes a complete report.

Tiny data and one repeat: the figures are meaningless and nothing here checks a speed; only
that each row of the table is there with numbers, and that the plots were drawn."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CENSUS, ROOT

ROWS = ("P1", "P2", "P3", "P4", "P5a", "P5b", "P6", "P7", "P8", "P9", "P10", "P12", "P13")
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
pytestmark = pytest.mark.slow  # two minutes: every stage of the bench, at tiny sizes


def test_smoke_run_writes_the_table_and_the_plots(tmp_path):
    output = tmp_path / "benchmarks.md"
    cmd = [str(Path(sys.executable).parent / "tfos"), "bench", "--config", str(CENSUS), "--smoke",
           "--output", str(output), "--workdir", str(tmp_path / "work")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "== P3 P6 P7 P8 training and scaling" in proc.stdout and "repeat 1/1" in proc.stdout  # progress lines

    text = output.read_text()
    for row in ROWS:
        line = next((ln for ln in text.splitlines() if ln.startswith(f"| {row} |")), None)
        assert line is not None, f"no {row} row in the table"
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert re.search(NUMBER, cells[2]), line  # measured median
        assert re.search(NUMBER, cells[4]), line  # ratio or absolute value
        assert cells[6] in ("yes", "**no**"), line
    for section in ("## Machine and versions", "## Sizes", "tensorflowonspark", "pyarrow", "batch then parse",
                    "in memory", "## Scaling", "**tfos predict**", "**P12** `mlflow.pyfunc.spark_udf` on version 1"):
        assert section in text
    # the scaling table: one process, one and two workers (with each gradient exchange, and at half the
    # batch), a parameter server; each with its step's parts
    for row in ("local strategy, one process", "multi_worker_mirrored, 1 worker", "multi_worker_mirrored, 2 workers",
                "per worker, ring all-reduce", "(batch 32)", "(16 per worker)", "parameter_server, 2 workers"):
        scaling = text.split("## Scaling", 1)[1].split("\n## ", 1)[0]
        line = next((ln for ln in scaling.splitlines() if ln.startswith("| ") and row in ln), None)
        assert line is not None, f"no scaling row for {row}"
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 9 and all(re.search(NUMBER, c) for c in cells[1:8]), line
    for png in ("results.png", "input_pipeline.png", "scaling.png"):
        path = tmp_path / "benchmarks" / png
        assert path.stat().st_size > 10_000
        assert f"benchmarks/{png}" in text
