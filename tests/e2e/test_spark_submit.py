"""spark-submit of the prepare and sweep entry points on local-cluster: real executor JVMs and Python workers."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CENSUS, ROOT, census_overrides

BIN = Path(sys.executable).parent


def run(cmd, expect: int = 0):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "TFOS_VENV": str(BIN.parent)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == expect, f"{cmd[:3]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow  # make test submits prepare to YARN and to an isolated standalone cluster
def test_spark_submit_prepare_on_local_cluster(spark, tmp_path):
    from tfos_jobs.data import synthetic

    raw, out = tmp_path / "raw", tmp_path / "dataset"
    sets = [a for o in census_overrides(raw, out, people=2000, master="local[1]") for a in ("--set", o)]
    assert synthetic.generate(spark, str(raw), 2000, 20.0, 42, "2026-01-01")["people"] == 2000

    submit = run([
        str(ROOT / "scripts" / "tfos-submit"), "--master", "local-cluster[2,1,1024]",
        "--conf", "spark.ui.showConsoleProgress=false",
        "tfos_jobs/entrypoints/prepare.py", "--config", str(CENSUS), *sets,
    ])
    manifest = json.loads((out / "_meta" / "manifest.json").read_text())
    records = manifest["splits"]["train"]["records"] + manifest["splits"]["eval"]["records"]
    assert records == 2000 - manifest["rejected"]["rows"]
    assert len(manifest["splits"]["train"]["files"]) == 4
    assert f"train {manifest['splits']['train']['records']:,} in 4 files" in submit.stdout
    assert manifest["spark"]["master"] == "local-cluster[2,1,1024]"  # spark-submit's master wins over the config's


def test_plain_spark_submit_without_the_jar_is_told_how_to_fix_it(tmp_path):
    proc = run([
        str(BIN / "spark-submit"), "--master", "local[1]", "tfos_jobs/entrypoints/prepare.py", "--config", str(CENSUS),
        "--set", f"prepare.output={tmp_path}/out",
    ], expect=2)
    output = proc.stdout + proc.stderr  # spark-submit merges the Python driver's stderr into its stdout
    assert "spark-submit was run without the TFRecord data source jar: add --jars" in output
    assert "scripts/tfos-submit" in output


@pytest.mark.slow
def test_spark_submit_sweep_on_local_cluster(tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "dataset"
    sets = [a for o in census_overrides(raw, out, people=2000, master="local[1]") for a in ("--set", o)]
    run([str(BIN / "tfos"), "generate", "--config", str(CENSUS), *sets])
    run([str(BIN / "tfos"), "prepare", "--config", str(CENSUS), *sets])
    space = tmp_path / "sweep.toml"
    space.write_text(f'[sweep]\ndir = "{tmp_path}/sweep"\nmax_trials = 2\nearly_stopping = "none"\n'
                     '[sweep.fixed]\n"train.epochs" = 1\n"train.steps_per_epoch" = 5\n'
                     '[params."train.learning_rate"]\ntype = "float"\nlow = 0.001\nhigh = 0.01\n')
    sweep = run([
        str(ROOT / "scripts" / "tfos-submit"), "--master", "local-cluster[2,1,1024]",
        "tfos_jobs/entrypoints/sweep.py", "--config", str(CENSUS), "--space", str(space), "--set", f"train.dataset={out}",
    ])
    assert "trial 002 completed" in sweep.stdout and "leaderboard (maximize val_auc)" in sweep.stdout
    assert (tmp_path / "sweep" / "best" / "saved_model" / "saved_model.pb").exists()
