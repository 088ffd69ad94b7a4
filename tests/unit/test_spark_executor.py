"""A TF node names the Spark executor it runs on from its ancestors' command lines (an executor
JVM's `--executor-id`), or from Kubernetes' environment variable; "driver" in local mode."""
from __future__ import annotations

import os
import subprocess
import sys

from tfos_jobs.cluster.node.spark_executor import DRIVER, ENV, FLAG, executor_id

# A grandchild asks: the flag is on its grandparent's command line, as on an executor JVM's
# (Python worker daemon -> worker -> node process in between).
ASK = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
       "'from tfos_jobs.cluster.node.spark_executor import executor_id; print(executor_id())'], check=True)")


def ask(*args: str, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if k != ENV}
    proc = subprocess.run([sys.executable, "-c", ASK, *args], capture_output=True, text=True, check=True,
                          env={**clean, **(env or {})}, timeout=60)
    return proc.stdout.strip()


def test_the_executor_id_is_read_from_the_executor_jvms_command_line_above_the_process():
    assert ask("--driver-url", "spark://x", FLAG.decode(), "7", "--hostname", "h") == "7"


def test_kubernetes_environment_variable_names_the_executor():
    assert ask(env={ENV: "12"}) == "12"


def test_a_process_under_no_executor_runs_in_the_driver():
    assert ask() == DRIVER
    assert ask(FLAG.decode()) == DRIVER  # a flag without its value names no executor
    assert executor_id(pid=os.getpid()) in (DRIVER, os.environ.get(ENV))
