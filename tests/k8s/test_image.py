"""The image itself, run as a container outside Kubernetes (podman): the CLI answers, and the
demo's pipeline runs end to end inside it, on the container's own disk."""
from __future__ import annotations

import os
import re
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
    """`tfos demo` as a user runs it first, at its full size, inside the container."""
    proc = podman("tfos", "demo", "--config", "census", timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "people 100,000 rows" in out and "records: train" in out
    auc = float(re.search(r"trained in [0-9.]+ s; eval: .*auc ([0-9.]+)", out).group(1))
    assert auc > 0.85, out[-3000:]
    rows = [line for line in out.splitlines() if line.startswith("|")]
    assert len(rows) == 17  # the demo query's header and its 16 education levels
    assert "predicted 100,000 rows into file:/opt/tfos/demo-output/predictions" in out
