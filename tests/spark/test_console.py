"""What a `tfos` command prints on a console: its own lines and the result, no Spark start-up
notices, no Java stack for a path that is looked up; `--verbose` brings Spark's profile back."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

BIN = Path(sys.executable).parent
JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"  # the JVM's own, before any logger


def sql(tmp_path: Path, *extra: str) -> list[str]:
    """`tfos sql` on a session without a model or data: the query still runs."""
    missing = tmp_path / "nowhere"
    sets = ["spark.master=local[1]", f"predict.model={missing}/model",
            *(f"sources.{name}.path={missing}/{name}" for name in ("people", "regions", "events"))]
    proc = subprocess.run([str(BIN / "tfos"), "sql", "--config", "census", *[a for s in sets for a in ("--set", s)],
                           "-e", "SELECT 41 + 1 AS answer", *extra],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line != JVM_NOTICE]


def test_a_command_prints_its_lines_and_its_result_only(tmp_path):
    lines = sql(tmp_path)
    assert lines[1:] == ["+------+", "|answer|", "+------+", "|42    |", "+------+", ""], lines
    assert lines[0].startswith("-- predict_income() is not registered"), lines


def test_verbose_gives_sparks_own_logs_back(tmp_path):
    lines = sql(tmp_path, "--verbose")
    assert "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties" in lines
    assert "|42    |" in lines
