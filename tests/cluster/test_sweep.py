"""Sweeps on a real local-cluster: trials are Spark tasks on two executors, run as users run
them (`tfos sweep` processes); the small dataset is prepared once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from tfos_jobs import config
from tfos_jobs.data import synthetic
from tfos_jobs.data.assemble import assemble
from tfos_jobs.jobs import prepare

from tests.conftest import CENSUS, ROOT, census_overrides

BIN = Path(sys.executable).parent
PEOPLE = 6_000
BASE = ["spark.master=local-cluster[2,1,1536]", "spark.conf.spark.ui.showConsoleProgress=false",
        f"spark.conf.spark.executorEnv.PYTHONPATH={ROOT}"]
FAST = 'sweep.fixed={"train.epochs" = 2, "train.steps_per_epoch" = 20, "train.batch_size" = 128}'


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep-data")
    raw, out = root / "raw", root / "dataset"
    synthetic.generate(spark, str(raw), PEOPLE, 3.0, 5, "2026-01-01")
    cfg = config.load(CENSUS, census_overrides(raw, out, PEOPLE))
    prepare.run(spark, cfg)
    features, _ = assemble(spark, cfg, for_prediction=True)
    return out, features.limit(300).cache()


def write_space(path: Path, sweep: dict, params: str) -> Path:
    lines = ["[sweep]"] + [f"{k} = {json.dumps(v)}" for k, v in sweep.items()]
    path.write_text("\n".join(lines) + "\n" + params)
    return path


def sweep(dataset: Path, space: Path, *overrides: str, expect: int = 0) -> subprocess.CompletedProcess:
    sets = [*BASE, f"train.dataset={dataset[0]}", *overrides]
    cmd = [str(BIN / "tfos"), "sweep", "--config", str(CENSUS), "--space", str(space),
           *[a for s in sets for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def results(sweep_dir: Path) -> pd.DataFrame:
    table = pd.read_parquet(sweep_dir / "results.parquet")
    csv = pd.read_csv(sweep_dir / "results.csv")
    assert list(csv["trial"]) == list(table["trial"]) and list(csv["status"]) == list(table["status"])
    return table.set_index("trial")


def overlapping(table: pd.DataFrame) -> bool:
    spans = sorted(zip(table["started"], table["finished"]))
    return any(later_start < end for (_, end), (later_start, _) in zip(spans, spans[1:]))


@pytest.fixture(scope="module")
def grid(dataset, tmp_path_factory):
    """Good and hopeless learning rates × a working and a raising model function, in two runs:
    trial 1 first, then the rest. The median rule can only judge a trial against others that
    have reported epochs; in one run the hopeless trial 3, started in a Python worker that had
    TensorFlow loaded already, could finish all its epochs before trial 1 finished its first."""
    root = tmp_path_factory.mktemp("grid")
    space = write_space(root / "sweep.toml", {
        "dir": str(root / "sweep"), "algorithm": "grid", "max_trials": 10, "max_parallel_trials": 2,
        "early_stopping": "median", "warmup_epochs": 1, "min_trials": 1,
    }, '[params."train.learning_rate"]\ntype = "categorical"\nvalues = [0.01, 1e-7]\n'
       '[params."train.model.kind"]\ntype = "categorical"\nvalues = ["wide_deep", "tests.cluster.boom:build"]\n')
    fixed = 'sweep.fixed={"train.epochs" = 4, "train.steps_per_epoch" = 20, "train.batch_size" = 128}'
    first = sweep(dataset, space, fixed, "sweep.max_trials=1")
    rest = sweep(dataset, space, fixed)
    return root / "sweep", first, rest


def test_grid_sweep_runs_every_point_in_parallel_and_records_failures(grid):
    sweep_dir, first, proc = grid
    table = results(sweep_dir)
    assert list(table.index) == [1, 2, 3, 4]  # 2 × 2 grid points, max_trials 10
    assert "1 of 4 trials already finished, 3 to run" in proc.stdout
    assert list(table["learning_rate"]) == [0.01, 0.01, 1e-7, 1e-7]
    assert overlapping(table), "no two trials ran at the same time"
    failed = table[table["model_kind"] == "tests.cluster.boom:build"]
    assert list(failed["status"]) == ["failed", "failed"]
    assert all("boom: this model function always fails" in e for e in failed["error"])
    assert (sweep_dir / "trial-002" / "error.txt").read_text().count("Traceback") == 1
    assert table.loc[1, "status"] == "completed" and table.loc[1, "epochs_run"] == 4
    assert 0.75 < table.loc[1, "val_auc"] < 1
    assert "trial 002 failed" in proc.stdout and "trial 001 epoch 1/4" in first.stdout
    assert "leaderboard (maximize val_auc)" in proc.stdout
    assert (sweep_dir / "sweep.png").stat().st_size > 10_000
    assert json.loads((sweep_dir / "best" / "trial.json").read_text())["trial"] == 1


def test_median_rule_stops_the_hopeless_trial_without_exporting_it(grid):
    sweep_dir = grid[0]
    table = results(sweep_dir)
    # lr 1e-7 barely moves from the initial weights; trial 1's AUC is the median it is held to.
    assert table.loc[3, "status"] == "pruned"
    assert table.loc[3, "epochs_run"] < 4
    assert table.loc[3, "val_auc"] < table.loc[1, "val_auc"]
    assert not (sweep_dir / "trial-003" / "saved_model").exists()
    assert (sweep_dir / "trial-001" / "saved_model" / "saved_model.pb").exists()
    assert not (sweep_dir / "trial-001" / "backup").exists() and not (sweep_dir / "trial-003" / "backup").exists()


RANDOM = ('[params."train.learning_rate"]\ntype = "float"\nlow = 0.001\nhigh = 0.05\nscale = "log"\n'
          '[params."train.model.first_layer_size"]\ntype = "int"\nlow = 8\nhigh = 64\n')


@pytest.fixture(scope="module")
def resumed(dataset, tmp_path_factory):
    """A random sweep run three times: 2 trials; then 4 with a 1-second budget (the new
    trials are stopped); then 4 again, which runs only those two."""
    root = tmp_path_factory.mktemp("random")
    space = write_space(root / "sweep.toml", {"dir": str(root / "sweep"), "algorithm": "random", "seed": 3,
                                              "max_parallel_trials": 2, "early_stopping": "none"}, RANDOM)
    first = sweep(dataset, space, FAST, "sweep.max_trials=2")
    first_results = {n: (root / "sweep" / f"trial-00{n}" / "result.json").read_text() for n in (1, 2)}
    stopped = sweep(dataset, space, FAST, "sweep.max_trials=4", "sweep.time_budget_seconds=1")
    stopped_table = results(root / "sweep")
    third = sweep(dataset, space, FAST, "sweep.max_trials=4")
    return root / "sweep", first_results, (first, stopped, third), stopped_table


def test_time_budget_stops_running_trials_and_a_rerun_runs_only_the_rest(resumed):
    sweep_dir, first_results, (first, stopped, third), stopped_table = resumed
    assert "2 of 4 trials already finished, 2 to run" in stopped.stdout
    assert "time budget of 1 s used up" in stopped.stdout
    assert list(stopped_table["status"]) == ["completed", "completed", "cancelled", "cancelled"]
    assert "2 of 4 trials already finished, 2 to run" in third.stdout
    assert "trial 001 started" not in third.stdout and "trial 003 started" in third.stdout
    for n, text in first_results.items():  # finished trials are not run again
        assert (sweep_dir / f"trial-00{n}" / "result.json").read_text() == text
    table = results(sweep_dir)
    assert list(table["status"]) == ["completed"] * 4
    assert overlapping(table.loc[[3, 4]])


def test_random_settings_are_reproducible_and_within_the_space(resumed):
    sweep_dir, *_ = resumed
    from tfos_jobs.search import samplers, space

    definition = space.load(sweep_dir.parent / "sweep.toml", ["sweep.max_trials=4"])
    again = samplers.make(definition)
    table = results(sweep_dir)
    for n in range(1, 5):
        proposed = again.propose(n - 1)
        assert table.loc[n, "learning_rate"] == proposed["train.learning_rate"]
        assert table.loc[n, "model_first_layer_size"] == proposed["train.model.first_layer_size"]
    assert table["learning_rate"].between(0.001, 0.05).all() and table["model_first_layer_size"].between(8, 64).all()
    assert table["learning_rate"].nunique() == 4


def test_best_is_the_best_recorded_trial_and_serves_from_sql(spark, dataset, resumed):
    import udfs

    sweep_dir, *_ = resumed
    table = results(sweep_dir)
    best = json.loads((sweep_dir / "best" / "trial.json").read_text())
    assert best["trial"] == int(table["val_auc"].idxmax())
    assert best["value"] == pytest.approx(table["val_auc"].max())

    _, features = dataset
    udfs.register(spark, "predict_best", str(sweep_dir / "best"))
    udfs.register(spark, "predict_trial", str(sweep_dir / f"trial-{best['trial']:03d}"))
    scored = features.select(F.expr("predict_best(struct(*))").alias("best"),
                             F.expr("predict_trial(struct(*))").alias("trial")).toPandas()
    got = np.array([r["probability"] for r in scored["best"]])
    assert len(got) == 300 and ((got >= 0) & (got <= 1)).all()
    assert got.std() > 0.01  # a trained model, not a constant
    # best/ is a copy of the best trial's own model
    np.testing.assert_array_equal(got, np.array([r["probability"] for r in scored["trial"]]))


@pytest.mark.slow
def test_trials_can_be_tfos_clusters(dataset, tmp_path):
    """workers_per_trial = 2: each trial is a two-worker MultiWorkerMirrored cluster."""
    space = write_space(tmp_path / "sweep.toml", {
        "dir": str(tmp_path / "sweep"), "algorithm": "grid", "max_parallel_trials": 1, "workers_per_trial": 2,
        "early_stopping": "none"}, '[params."train.learning_rate"]\ntype = "categorical"\nvalues = [0.01, 0.003]\n')
    proc = sweep(dataset, space, FAST, "train.reservation_timeout=60")
    table = results(tmp_path / "sweep")
    assert list(table["status"]) == ["completed", "completed"], proc.stdout[-2000:]
    for n in (1, 2):
        m = json.loads((tmp_path / "sweep" / f"trial-00{n}" / "metrics.json").read_text())
        assert [node["role"] for node in m["nodes"]] == ["chief", "worker"]
        assert m["epochs"] == 2
    assert (tmp_path / "sweep" / "best" / "saved_model" / "saved_model.pb").exists()
