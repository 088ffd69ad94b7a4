"""The image itself, run as a container outside Kubernetes (podman): the CLI answers, and the
demo's pipeline runs end to end inside it on a small data set, on the container's own disk."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.k8s

VERSION = next(line.split('"')[1] for line in (ROOT / "pyproject.toml").read_text().splitlines()
               if line.startswith("version"))
IMAGE = f"localhost/tfos-jobs:{VERSION}"


def podman(*args: str, timeout: float) -> subprocess.CompletedProcess:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make k8s-tools installs it)")
    env = {**os.environ, "CONTAINERS_CONF": str(Path.home() / ".cache" / "tfos-image" / "containers.conf")}
    return subprocess.run(["podman", "run", "--rm", "--network=host", IMAGE, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_the_image_runs_the_cli():
    proc = podman("tfos", "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Distributed TensorFlow on Apache Spark." in proc.stdout


def test_the_image_runs_the_demo():
    proc = podman("tfos", "demo", "--config", "census", "--set", "synthetic.people=5000", "--set", "train.epochs=2",
                  timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "wrote demo-output/raw: people 5,000 rows" in out
    assert "== SQL:" in out and "eval" in out
    rows = [line for line in out.splitlines() if line.startswith("|")]
    assert len(rows) >= 17  # the demo query's header and its 16 education levels
