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
    """Building the CLI's parser and loading a config are on the path of every `tfos` command:
    neither starts Spark's Python side (the API, which does, is loaded by the commands that run
    a job); the benchmarks, outside the package, are never imported by it."""
    import subprocess
    import sys

    heavy = ("tensorflow", "mlflow", "optuna", "benchmarks", "pyspark")
    code = (f"import sys, tfos_jobs.cli as c\ntry:\n    c.main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "usage: tfos" in proc.stdout or '"train"' in proc.stdout  # it did what was asked
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_verbose_is_sparks_log_level_in_its_place_among_the_overrides():
    from tfos_jobs.cli.parser import common_arguments, parser

    args = parser().parse_args(["config", "--config", "census", "--set", "a.b=1", "--verbose", "--set", "a.c=2"])
    # a later --set wins over --verbose, an earlier one not
    assert args.overrides == ["a.b=1", "spark.conf.spark.log.level=INFO", "a.c=2"]
    verbose = next(a for a in common_arguments()._actions if "--verbose" in a.option_strings)
    assert "same as --set spark.conf.spark.log.level=INFO)" in verbose.help


def test_tfos_bench_runs_the_bench_of_the_checkout_or_says_where_it_lives(tmp_path, capsys):
    """`tfos bench` hands its arguments, untouched, to the bench beside the package in a fresh
    interpreter (the package never imports it); a `benchmarks` folder where the command runs is
    not taken for it. An installed package, with no bench beside it, says where the bench is."""
    import subprocess
    import sys

    from tfos_jobs import cli

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text("raise SystemExit('not the bench of the checkout')\n")
    tfos = [sys.executable, "-m", "tfos_jobs.cli", "bench"]
    shown = subprocess.run([*tfos, "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: tfos bench [-h] --config CONFIG") and "--smoke" in shown.stdout
    wrong = subprocess.run([*tfos, "--config", "census", "--nope"], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
    assert wrong.returncode == 2 and "tfos bench: error: unrecognized arguments: --nope" in wrong.stderr
    assert cli.bench(["--help"], checkout=tmp_path / "installed") == 2
    assert capsys.readouterr().err.strip() == cli.BENCH_MISSING
