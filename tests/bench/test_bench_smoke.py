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

P14 = ("P14a", "P14b", "P14c", "P14d", "P14e")
P15 = ("P15a", "P15b", "P15c", "P15j")
P16 = ("P16a", "P16b")
P18 = ("P18a", "P18b", "P18c")
P19 = ("P19a", "P19b", "P19c")
ROWS = ("P1", "P2", "P3", "P4", "P4f", "P5a", "P5b", "P6", "P7", "P8", "P9", "P10", "P12", "P13", *P14, *P15, *P16, "P17",
        *P18, *P19)
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
pytestmark = pytest.mark.slow  # minutes each: every stage of the bench (or P14, P15 or P16 alone), at tiny sizes


def bench(tmp_path: Path, *args: str) -> tuple[str, str]:
    """`tfos bench --smoke` with `args`: its output and its report."""
    output = tmp_path / "benchmarks.md"
    cmd = [str(Path(sys.executable).parent / "tfos"), "bench", "--config", str(CENSUS), "--smoke",
           "--output", str(output), "--workdir", str(tmp_path / "work"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, output.read_text()


def assert_rows(text: str, rows: tuple[str, ...]) -> None:
    ids = [ln.split("|")[1].strip() for ln in text.split("\n## ", 1)[0].splitlines() if ln.startswith("| P")]
    assert sorted(ids) == sorted(rows), ids
    for row in rows:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {row} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert re.search(NUMBER, cells[2]), line  # measured median
        assert re.search(NUMBER, cells[4]), line  # ratio or absolute value
        assert cells[6] in ("yes", "**no**"), line


def assert_p14_section(text: str) -> None:
    """Time and the peak memory of the driver and both executors, per step and scale."""
    section = text.split("## 100x the people (P14)", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| step")]
    assert [tuple(c.strip() for c in ln.strip("|").split("|")[:2]) for ln in lines] == [
        (step, scale) for step in ("prepare", "train", "predict") for scale in ("1x", "100x")]
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 7 and all(re.search(NUMBER, c) for c in cells[2:]), line
        assert all(float(c.replace(",", "")) > 50 for c in cells[4:]), line  # MiB resident: a live JVM each
    assert "20,000 people" in section and "streamed from disk" in section


def assert_p15_section(text: str, work: Path) -> None:
    """Latency quantiles and both rates in the text; the stage's broker stopped."""
    section = text.split("## tfos stream (P15)", 1)[1].split("\n## ", 1)[0]
    assert re.search(rf"p50 \*\*{NUMBER} s\*\*, p99 \*\*{NUMBER} s\*\*", section), section
    assert re.search(rf"Stream {NUMBER} rows/s, batch {NUMBER} rows/s", section), section
    assert re.search(rf"same Kafka records .*: {NUMBER}\s+rows/s", section, re.S), section
    directory = str(work / "p15" / "kafka").encode()
    assert [p for p in Path("/proc").glob("[0-9]*/cmdline") if directory in _read(p)] == []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended meanwhile
        return b""


def test_smoke_run_writes_the_table_and_the_plots(tmp_path):
    stdout, text = bench(tmp_path)
    assert "== P3 P6 P7 P8 training and scaling" in stdout and "repeat 1/1" in stdout  # progress lines
    assert_rows(text, ROWS)
    assert_p14_section(text)
    assert_p15_section(text, tmp_path / "work")
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
    for png in ("results.png", "input_pipeline.png", "scaling.png", "hundredfold.png", "streaming.png"):
        path = tmp_path / "benchmarks" / png
        assert path.stat().st_size > 10_000
        assert f"benchmarks/{png}" in text


def test_p14_runs_alone_and_reports_only_itself(tmp_path):
    stdout, text = bench(tmp_path, "--only", "P14")
    assert "== P14 100x the people" in stdout and "== P3" not in stdout
    assert_rows(text, P14)
    assert_p14_section(text)
    assert "## Scaling" not in text and "## Input pipeline" not in text
    assert sorted(p.name for p in (tmp_path / "benchmarks").iterdir()) == ["hundredfold.png", "results.png"]


def test_p15_runs_alone_and_reports_only_itself(tmp_path):
    stdout, text = bench(tmp_path, "--only", "P15")
    assert "== P15 tfos stream" in stdout and "== P3" not in stdout
    assert_rows(text, P15)
    assert_p15_section(text, tmp_path / "work")
    assert "## Scaling" not in text and "## 100x the people" not in text
    assert sorted(p.name for p in (tmp_path / "benchmarks").iterdir()) == ["results.png", "streaming.png"]


def test_p16_runs_alone_and_reports_only_itself(tmp_path):
    """The node inputs' two rows: throughput against the whole-file path, and the executors' peak
    memory on the larger files against the smaller ones (at the smoke run's sizes)."""
    stdout, text = bench(tmp_path, "--only", "P16")
    assert "== P16 node inputs at any file size" in stdout and "== P3" not in stdout
    assert_rows(text, P16)
    assert re.search(r"P16b large files \(4[89] MiB each\)", stdout), stdout[-2000:]
    assert "## Scaling" not in text and "## 100x the people" not in text


def test_p17_runs_alone_and_reports_only_itself(tmp_path):
    """Prepare's time per sensor value, a wide table against a narrow one of the same rows."""
    stdout, text = bench(tmp_path, "--only", "P17")
    assert "== P17 wide sensor tables" in stdout and "== P10" not in stdout
    assert_rows(text, ("P17",))
    assert re.search(r"wide sensor table \(38 vs 8 sensors\) \| [0-9,]+ rows", text), text


def test_p18_runs_alone_and_reports_only_itself(tmp_path):
    """A lost executor's cost with step checkpoints and with epoch checkpoints only, and what step
    checkpoints cost a run without faults."""
    stdout, text = bench(tmp_path, "--only", "P18")
    assert "== P18 a lost executor" in stdout and "== P3" not in stdout
    assert_rows(text, P18)
    assert stdout.count("relaunching the TF cluster") == 2  # one killed run per checkpoint setting
    assert re.search(rf"epoch checkpoints only \(.*\): the next training step {NUMBER} s after the loss", text), text
    assert re.search(rf"\| P18b \|.*\| {NUMBER} steps \| ≤ 500 steps \|", text), text


def test_p19_runs_alone_and_reports_only_itself(tmp_path):
    """A table with a text column: prepare and training with it against without it, and the
    prediction function on raw texts against predict_batch_udf on the same model."""
    stdout, text = bench(tmp_path, "--only", "P19")
    assert "== P19 a text column" in stdout and "== P3" not in stdout
    assert_rows(text, P19)
    assert re.search(r"\| P19 rows \| 3,000 rows: a review", text), text
    assert "training local on" in stdout  # both models trained: the UDF scores the one with the text
