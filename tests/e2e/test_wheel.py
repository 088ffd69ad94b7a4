"""The package as users deploy it: a wheel built from a clean copy of the repository, installed
into a fresh venv with the tested versions, used from outside the repository; then that venv
packed and shipped to a standalone cluster with `--archives`, the executors running its Python.

Slow (building the jar and installing TensorFlow into a new venv take minutes): `make test-all`."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
PEOPLE = 3000
CLUSTER = ROOT / "scripts" / "standalone-cluster"


def run(cmd: list, cwd: Path, env: dict[str, str] | None = None, timeout: int = 1200) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHONPATH", "VIRTUAL_ENV"))}
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**clean, "TF_USE_LEGACY_KERAS": "1", **(env or {})})
    assert proc.returncode == 0, f"{cmd[:3]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def clean_copy(dest: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, nothing ignored): no jar, no venv."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src, dst = ROOT / name, dest / name
        if not os.path.lexists(src):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    assert not (dest / "tfos_jobs" / "jars" / "tfos-tfrecord.jar").exists()
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel (and the constraints) installed: its bin/ directory."""
    root = tmp_path_factory.mktemp("wheel")
    src = clean_copy(root / "src")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", root / "dist", src], cwd=root)
    wheel = next((root / "dist").glob("tfos_jobs-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "tfos_jobs/jars/tfos-tfrecord.jar" in names
        assert not [n for n in names if n.startswith(("benchmarks/", "tfos_jobs/bench/"))]  # the bench stays in the repository
        assert {"tfos_jobs/resources/conf/census.toml", "tfos_jobs/resources/conf/sweep.toml",
                "tfos_jobs/resources/conf/queries/positive_rate_by_education.sql"} <= names
        script = zf.getinfo("tfos_jobs/resources/gpu_discovery.sh")
        assert (script.external_attr >> 16) & stat.S_IXUSR, "the GPU discovery script must stay executable"
    venv = root / "venv"
    # --copies: a packed venv must hold no symlink leading out of it (Spark refuses to unpack those)
    run([sys.executable, "-m", "venv", "--copies", venv], cwd=root)
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "-c", src / "constraints.txt", wheel], cwd=root)
    return venv / "bin"


def test_the_wheel_prepares_and_predicts_from_outside_the_repository(installed, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {"PYSPARK_PYTHON": str(installed / "python")}
    sets = [f"synthetic.people={PEOPLE}", "spark.master=local-cluster[2,1,1024]", "train.strategy=local",
            "train.epochs=1", "spark.conf.spark.ui.showConsoleProgress=false", "train.tensorboard=false"]
    args = [a for s in sets for a in ("--set", s)]
    tfos = installed / "tfos"
    run([tfos, "generate", "--config", "census", *args], cwd=work, env=env)
    prep = run([tfos, "prepare", "--config", "census", *args], cwd=work, env=env)
    assert "train" in prep.stdout and (work / "demo-output" / "dataset" / "_meta" / "manifest.json").exists()
    assert list((work / "demo-output" / "dataset" / "train").glob("part-*.tfrecord"))
    run([tfos, "train", "--config", "census", *args], cwd=work, env=env)
    pred = run([tfos, "predict", "--config", "census", *args], cwd=work, env=env)
    assert f"{PEOPLE:,}" in pred.stdout, pred.stdout
    assert list((work / "demo-output" / "predictions").glob("*.parquet"))
    imported = run([installed / "python", "-c", "import tfos_jobs; print(tfos_jobs.__file__)"], cwd=work)
    assert str(ROOT) not in imported.stdout and str(installed.parent) in imported.stdout


PROBE = '''
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
def where(_):
    import sys, tfos_jobs
    return sys.executable + " " + tfos_jobs.__file__
print("EXECUTORS", sorted(set(spark.sparkContext.parallelize(range(4), 4).map(where).collect())))
spark.stop()
'''


def test_a_job_ships_its_environment_as_an_archive_to_a_standalone_cluster(installed, tmp_path):
    """venv-pack the installed venv; spark-submit with --archives env.zip#env; executors run ./env/bin/python."""
    archive = tmp_path / "env.zip"  # Spark unpacks zip entries with their file modes; tar entries lose them
    run([BIN / "venv-pack", "-p", installed.parent, "-o", archive, "--format", "zip", "--exclude", "lib64/*",
         "--quiet"], cwd=tmp_path)
    cluster_dir = tmp_path / "cluster"
    daemons = {"TFOS_VENV": str(installed.parent), "SPARK_LOCAL_IP": "127.0.0.1"}
    url = run([CLUSTER, "start", cluster_dir, 2, 1, "2g"], cwd=tmp_path, env=daemons).stdout.strip().splitlines()[-1]
    try:
        site = Path(run([installed / "python", "-c", "import tfos_jobs, os; print(os.path.dirname(tfos_jobs.__file__))"],
                        cwd=tmp_path).stdout.strip())
        submit = [installed / "spark-submit", "--master", url, "--archives", f"{archive}#env",
                  "--jars", site / "jars" / "tfos-tfrecord.jar",
                  "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=1g"]
        env = {"PYSPARK_PYTHON": "./env/bin/python", "PYSPARK_DRIVER_PYTHON": str(installed / "python"),
               "SPARK_LOCAL_IP": "127.0.0.1"}
        (tmp_path / "probe.py").write_text(PROBE)
        probe = run([*submit, tmp_path / "probe.py"], cwd=tmp_path, env=env)
        line = next(ln for ln in probe.stdout.splitlines() if ln.startswith("EXECUTORS"))
        assert f"{cluster_dir}/work-" in line and "/env/" in line and str(installed.parent) not in line, line

        work = tmp_path / "work"
        work.mkdir()
        sets = [f"synthetic.people={PEOPLE}", "spark.master=local[1]", "train.strategy=local", "train.epochs=1",
                "train.tensorboard=false"]
        args = [a for s in sets for a in ("--set", s)]
        local = {"PYSPARK_PYTHON": str(installed / "python")}
        for step in ("generate", "prepare", "train"):
            run([installed / "tfos", step, "--config", "census", *args], cwd=work, env=local)
        run([*submit, site / "predict.py", "--config", "census", "--set", f"predict.output={work}/shipped"],
            cwd=work, env=env)
        assert list((work / "shipped").glob("*.parquet"))
        unpacked = list(cluster_dir.glob("work-*/app-*/*/env/bin/python"))
        assert unpacked, "no executor unpacked the archive"
    finally:
        subprocess.run([str(CLUSTER), "stop", str(cluster_dir)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **daemons})
