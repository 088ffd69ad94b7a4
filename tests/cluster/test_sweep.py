"""Sweeps on a real local-cluster: trials are Spark tasks on two executors, run as users run
them (`tfos sweep` processes); the small dataset is prepared once. `make test-all`: the sweep's
own rules run in seconds with its trials played by threads (tests/unit/test_sweep_launcher.py),
and a two-trial sweep on real executors in tests/connect/test_connect.py."""
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

pytestmark = pytest.mark.slow  # a few minutes in all
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


def study_trials(sweep_dir: Path) -> dict[int, tuple[int, str, dict]]:
    """The sweep's Optuna study as Optuna's own tools open it: sweep trial number -> (Optuna
    trial number, state, params)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    definition = json.loads((sweep_dir / "sweep.json").read_text())
    study = optuna.load_study(study_name=definition["study_name"],
                              storage=JournalStorage(JournalFileBackend(str(sweep_dir / "study.journal"))))
    return {t.user_attrs["sweep_trial"]: (t.number, t.state.name, t.params) for t in study.trials}


STATES = {"completed": "COMPLETE", "pruned": "PRUNED", "failed": "FAIL", "cancelled": "RUNNING"}


def same_as_results(study: dict[int, tuple[int, str, dict]], table: pd.DataFrame) -> bool:
    return {n: state for n, (_, state, _) in study.items()} == {n: STATES[s] for n, s in table["status"].items()}


@pytest.fixture(scope="module")
def grid(dataset, tmp_path_factory):
    """Good and hopeless learning rates × a working and a raising model function, without a
    pruner: every point runs, in one run."""
    root = tmp_path_factory.mktemp("grid")
    space = write_space(root / "sweep.toml", {
        "dir": str(root / "sweep"), "algorithm": "grid", "max_trials": 10, "max_parallel_trials": 2,
        "early_stopping": "none",
    }, '[params."train.learning_rate"]\ntype = "categorical"\nvalues = [0.01, 1e-7]\n'
       '[params."train.model.kind"]\ntype = "categorical"\nvalues = ["wide_deep", "tests.cluster.boom:build_on_nodes"]\n')
    return root / "sweep", sweep(dataset, space, FAST)


def test_grid_sweep_runs_every_point_in_parallel_and_records_failures(grid):
    sweep_dir, proc = grid
    table = results(sweep_dir)
    assert list(table.index) == [1, 2, 3, 4]  # 2 × 2 grid points, max_trials 10
    points = set(zip(table["learning_rate"], table["model_kind"]))
    assert points == {(lr, kind) for lr in (0.01, 1e-7) for kind in ("wide_deep", "tests.cluster.boom:build_on_nodes")}
    assert overlapping(table), "no two trials ran at the same time"
    failed = table[table["model_kind"] == "tests.cluster.boom:build_on_nodes"]
    assert list(failed["status"]) == ["failed", "failed"]
    assert all("boom: this model function always fails" in e for e in failed["error"])
    n_failed = int(failed.index[0])
    assert (sweep_dir / f"trial-{n_failed:03d}" / "error.txt").read_text().count("Traceback") == 1
    assert f"trial {n_failed:03d} failed" in proc.stdout
    good = int(table[(table["model_kind"] == "wide_deep") & (table["learning_rate"] == 0.01)].index[0])
    hopeless = int(table[(table["model_kind"] == "wide_deep") & (table["learning_rate"] == 1e-7)].index[0])
    assert table.loc[good, "status"] == "completed" and table.loc[good, "epochs_run"] == 2
    assert 0.7 < table.loc[good, "val_auc"] < 1
    assert table.loc[hopeless, "status"] == "completed" and table.loc[hopeless, "val_auc"] < table.loc[good, "val_auc"]
    assert f"trial {good:03d} epoch 1/2" in proc.stdout
    assert "leaderboard (maximize val_auc)" in proc.stdout
    assert (sweep_dir / "sweep.png").stat().st_size > 10_000
    assert json.loads((sweep_dir / "best" / "trial.json").read_text())["trial"] == good
    assert (sweep_dir / f"trial-{good:03d}" / "saved_model" / "saved_model.pb").exists()
    assert not (sweep_dir / f"trial-{good:03d}" / "backup").exists()
    study = study_trials(sweep_dir)
    assert same_as_results(study, table)
    assert all(study[n][2]["train.learning_rate"] == table.loc[n, "learning_rate"] for n in table.index)


TPE = ('[params."train.learning_rate"]\ntype = "categorical"\nvalues = [0.01, 1e-7]\n'
       '[params."train.model.first_layer_size"]\ntype = "int"\nlow = 8\nhigh = 64\n')


@pytest.fixture(scope="module")
def resumed(dataset, tmp_path_factory):
    """A TPE sweep with the median pruner run three times: 2 trials; then 4 with a 1-second
    budget (the new trials are stopped); then 4 again, which runs only those two. Seed 5 draws
    the learning rate 0.01 for trials 1 and 2 and the hopeless 1e-7 for trial 3 (TPE's first
    trials are random), so trial 3 is judged after completed good trials: the pruner stops it."""
    root = tmp_path_factory.mktemp("tpe")
    space = write_space(root / "sweep.toml", {"dir": str(root / "sweep"), "algorithm": "tpe", "seed": 5,
                                              "max_parallel_trials": 2, "early_stopping": "median",
                                              "warmup_epochs": 1, "min_trials": 1}, TPE)
    first = sweep(dataset, space, FAST, "sweep.max_trials=2")
    first_results = {n: (root / "sweep" / f"trial-00{n}" / "result.json").read_text() for n in (1, 2)}
    stopped = sweep(dataset, space, FAST, "sweep.max_trials=4", "sweep.time_budget_seconds=1")
    stopped_table, stopped_study = results(root / "sweep"), study_trials(root / "sweep")
    third = sweep(dataset, space, FAST, "sweep.max_trials=4")
    return root / "sweep", first_results, (first, stopped, third), (stopped_table, stopped_study)


def test_time_budget_stops_running_trials_and_a_rerun_runs_only_the_rest(resumed):
    sweep_dir, first_results, (first, stopped, third), (stopped_table, stopped_study) = resumed
    assert "2 of 4 trials already finished, 2 to run" in stopped.stdout
    assert "time budget of 1 s used up" in stopped.stdout
    assert list(stopped_table["status"])[2:] == ["cancelled", "cancelled"]
    assert set(stopped_table["status"][:2]) <= {"completed", "pruned"}
    assert "2 of 4 trials already finished, 2 to run" in third.stdout
    assert "trial 001 started" not in third.stdout and "trial 003 started" in third.stdout
    for n, text in first_results.items():  # finished trials are not run again
        assert (sweep_dir / f"trial-00{n}" / "result.json").read_text() == text
    table = results(sweep_dir)
    assert set(table["status"]) <= {"completed", "pruned"} and "completed" in set(table["status"][:2])
    assert overlapping(table.loc[[3, 4]])


def test_the_pruner_stops_the_hopeless_trial_without_exporting_it(resumed):
    sweep_dir, _, (*_, third), _ = resumed
    table = results(sweep_dir)
    assert list(table["learning_rate"][:3]) == [0.01, 0.01, 1e-7], "seed 5 no longer draws these learning rates"
    # lr 1e-7 barely moves from the initial weights; the completed trials' AUC is the median it is held to.
    assert table.loc[3, "status"] == "pruned" and table.loc[3, "epochs_run"] < 2
    assert table.loc[3, "val_auc"] < table.loc[table["status"] == "completed", "val_auc"].min()
    assert not (sweep_dir / "trial-003" / "saved_model").exists()
    assert not (sweep_dir / "trial-003" / "backup").exists()
    assert "pruned: 003" in third.stdout


def test_the_study_opens_with_optuna_and_matches_the_results(resumed):
    sweep_dir, _, _, (stopped_table, stopped_study) = resumed
    assert same_as_results(stopped_study, stopped_table)  # the stopped trials are RUNNING in the study
    study, table = study_trials(sweep_dir), results(sweep_dir)
    assert same_as_results(study, table)
    # the resumed run reused the stopped trials' Optuna trials: four trials, not six
    assert sorted(number for number, _, _ in study.values()) == [0, 1, 2, 3]
    assert {n: number for n, (number, _, _) in study.items()} == {n: number for n, (number, _, _) in stopped_study.items()}
    for n in table.index:
        assert study[n][2] == {"train.learning_rate": table.loc[n, "learning_rate"],
                               "train.model.first_layer_size": table.loc[n, "model_first_layer_size"]}
    assert table["model_first_layer_size"].between(8, 64).all()


def test_best_is_the_best_completed_trial_and_serves_from_sql(spark, dataset, resumed):
    import udfs

    sweep_dir, *_ = resumed
    table = results(sweep_dir)
    completed = table[table["status"] == "completed"]
    best = json.loads((sweep_dir / "best" / "trial.json").read_text())
    assert best["trial"] == int(completed["val_auc"].idxmax())
    assert best["value"] == pytest.approx(completed["val_auc"].max())

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


def test_trials_can_be_tfos_clusters_and_are_pruned_by_stopping_the_cluster(dataset, tmp_path):
    """workers_per_trial = 2: each trial is a two-worker MultiWorkerMirrored cluster. Seed 1
    puts the good learning rate first, so the hopeless one is judged against it."""
    space = write_space(tmp_path / "sweep.toml", {
        "dir": str(tmp_path / "sweep"), "algorithm": "grid", "seed": 1, "max_parallel_trials": 1,
        "workers_per_trial": 2, "early_stopping": "median", "warmup_epochs": 1, "min_trials": 1},
        '[params."train.learning_rate"]\ntype = "categorical"\nvalues = [0.01, 1e-7]\n')
    fixed = 'sweep.fixed={"train.epochs" = 4, "train.steps_per_epoch" = 20, "train.batch_size" = 128}'
    proc = sweep(dataset, space, fixed, "train.reservation_timeout=60")
    table = results(tmp_path / "sweep")
    assert list(table["learning_rate"]) == [0.01, 1e-7], "seed 1 no longer puts the good learning rate first"
    assert list(table["status"]) == ["completed", "pruned"], proc.stdout[-2000:]
    assert table.loc[2, "epochs_run"] < 4 and table.loc[2, "error"] is None
    assert "trial 002 pruned after epoch" in proc.stdout
    m = json.loads((tmp_path / "sweep" / "trial-001" / "metrics.json").read_text())
    assert [node["role"] for node in m["nodes"]] == ["chief", "worker"]
    assert m["epochs"] == 4
    assert not (tmp_path / "sweep" / "trial-002" / "saved_model").exists()
    assert (tmp_path / "sweep" / "best" / "saved_model" / "saved_model.pb").exists()
    assert same_as_results(study_trials(tmp_path / "sweep"), table)
