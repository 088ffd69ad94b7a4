"""What a `tfos` command prints on a console: its own lines and the result, no Spark start-up
notices, no Java stack for a path that is looked up; `--verbose` brings Spark's profile back."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow  # a second and third command run: `make test-all`
def test_verbose_gives_sparks_own_logs_back(tmp_path):
    lines = sql(tmp_path, "--verbose")
    assert "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties" in lines
    assert "|42    |" in lines


def on_terminal(argv: list[str], cwd: Path) -> str:
    """What `argv` writes to a terminal (a pseudo-terminal: stdout and stderr both on it)."""
    import os
    import pty

    out = bytearray()
    pid, fd = pty.fork()
    if pid == 0:  # the child: run the command on the terminal
        os.chdir(cwd)
        os.execv(argv[0], argv)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the command ended and closed the terminal
            break
        if not chunk:
            break
        out.extend(chunk)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


@pytest.mark.slow  # a second and third command run: `make test-all`
def test_on_a_terminal_stage_bars_are_drawn_and_never_over_the_result(tmp_path):
    missing = tmp_path / "nowhere"
    sets = ["spark.master=local[1]", f"predict.model={missing}/model",
            *(f"sources.{name}.path={missing}/{name}" for name in ("people", "regions", "events"))]
    text = on_terminal([str(BIN / "tfos"), "sql", "--config", "census", *[a for s in sets for a in ("--set", s)], "-e",
                        "SELECT count(*) AS n FROM range(0, 2000000000, 1, 1) WHERE id % 7 = 3"], tmp_path)
    assert "[Stage 0:" in text  # a job of a few seconds draws its bar on a terminal
    visible = [line.split("\r")[-1] for line in text.replace("\r\n", "\n").split("\n")]  # what stays on screen
    table = ["+---------+", "|n        |", "+---------+", "|285714286|", "+---------+"]
    start = visible.index(table[0])
    assert visible[start:start + len(table)] == table, visible
