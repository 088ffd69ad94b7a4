"""What building the wheel and the image relies on, checked on the files themselves (the image is
built and run by `make test-k8s`)."""
from __future__ import annotations

import re
import tomllib

import pytest

from packaging.requirements import Requirement

from tests.conftest import ROOT, load_file


def backend():
    return load_file(ROOT / "build_support" / "tfos_build_backend.py", "tfos_build_backend")


def test_the_jar_is_compiled_against_the_pyspark_the_project_runs_on():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    requirement = backend().pyspark_requirement()
    assert requirement in dependencies
    pinned = re.search(r"^pyspark==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert Requirement(requirement).specifier.contains(pinned), (requirement, pinned)


def test_the_dockerfile_uses_only_instructions_every_builder_knows():
    """No heredocs (BuildKit only: buildah and podman fail on `COPY <<EOF`) and no `# syntax`
    line (BuildKit would pull that frontend image from a registry)."""
    text = (ROOT / "Dockerfile").read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert not any("<<" in line for line in instructions)
    assert not re.search(r"^#\s*syntax\s*=", text, re.M | re.I)
    entrypoint = re.search(r'^ENTRYPOINT \["([^"]+)"\]', text, re.M).group(1)
    assert entrypoint == "/opt/tfos/scripts/image-entrypoint"
    assert (ROOT / "scripts" / "image-entrypoint").stat().st_mode & 0o111  # executable, as COPY keeps it


def test_tfos_submit_names_the_images_paths_the_dockerfile_makes():
    from tfos_jobs.deploy import kubernetes

    text = (ROOT / "Dockerfile").read_text()
    env = dict(re.findall(r"^\s+(?:ENV )?([A-Z_]+)=(\S+)", text, re.M))
    assert env["VIRTUAL_ENV"] == kubernetes.IMAGE_VENV
    assert env["PYSPARK_PYTHON"] == kubernetes.IMAGE_PYTHON
    assert env["SPARK_HOME"] == kubernetes.IMAGE_PACKAGE.removesuffix("tfos_jobs") + "pyspark"


@pytest.mark.parametrize("argv", [["--help"], ["config", "--config", "conf/census.toml"]])
def test_tfos_help_and_config_import_neither_tensorflow_nor_mlflow(argv):
    """Building the CLI's parser and loading a config are on the path of every `tfos` command;
    the benchmarks, outside the package, are imported only when `tfos bench` runs."""
    import subprocess
    import sys

    code = (f"import sys, tfos_jobs.cli as c\ntry:\n    c.main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'mlflow', 'optuna', 'benchmarks')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "usage: tfos" in proc.stdout or '"train"' in proc.stdout  # it did what was asked
    assert proc.stdout.strip().splitlines()[-1] == "[]"
