"""The sweep file, the samplers, the median rule and the results table (no Spark, no TF)."""
from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from tfos_jobs.jobs.sweep.driver import report as sweep_report
from tfos_jobs.errors import ConfigError
from tfos_jobs.storage import Storage
from tfos_jobs.search import samplers, space
from tfos_jobs.search.early_stopping import metric_history, should_stop

from tests.conftest import CENSUS, ROOT

SWEEP = ROOT / "conf" / "sweep.toml"


def write(tmp_path, text: str):
    path = tmp_path / "sweep.toml"
    path.write_text('[sweep]\ndir = "out"\n' + text)
    return path


def test_the_shipped_sweep_file_is_valid_against_the_census_config():
    s = space.load(SWEEP, [], str(CENSUS), [])
    assert s.algorithm == "random" and s.goal == "maximize" and s.metric == "val_auc"
    assert [p.column for p in s.params] == ["learning_rate", "model_first_layer_size", "model_num_layers", "batch_size"]
    assert s.fixed["train.epochs"] == 4


@pytest.mark.parametrize("text, message", [
    ('max_trails = 3\n[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n', "unknown key(s) sweep.max_trails"),
    ('[params."train.epochs"]\ntype = "integer"\nlow = 1\nhigh = 2\n', "params.train.epochs.type: 'integer'"),
    ('[params."train.learning_rate"]\ntype = "float"\nlow = 0.0\nhigh = 1.0\nscale = "log"\n', "log scale needs low > 0"),
    ('[params."train.learning_rate"]\ntype = "float"\nlow = 0.1\n', "params.train.learning_rate.high: a number is required"),
    ('[params."train.batch_size"]\ntype = "categorical"\nvalues = []\n', "non-empty list of values"),
    ('[params."prepare.split.eval_fraction"]\ntype = "float"\nlow = 0.1\nhigh = 0.2\n', "only training settings"),
    ('algorithm = "hyperband"\n[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n', "sweep.algorithm: 'hyperband'"),
    ('', "no parameters"),
])
def test_sweep_file_errors_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=None) as err:
        space.load(write(tmp_path, text))
    assert message in str(err.value)


def test_a_value_the_training_config_refuses_is_named_before_spark_starts(tmp_path):
    path = write(tmp_path, '[params."train.optimizer"]\ntype = "categorical"\nvalues = ["adam", "adamw2"]\n')
    with pytest.raises(ConfigError) as err:
        space.load(path, [], str(CENSUS), [])
    assert 'train.optimizer="adamw2"' in str(err.value) and "train.optimizer" in str(err.value)
    path = write(tmp_path, '[params."train.modle.num_layers"]\ntype = "int"\nlow = 1\nhigh = 2\n')
    with pytest.raises(ConfigError) as err:
        space.load(path, [], str(CENSUS), [])
    assert "modle" in str(err.value)


def test_grid_enumerates_every_combination_in_file_order_up_to_max_trials(tmp_path):
    path = write(tmp_path, 'algorithm = "grid"\nmax_trials = 100\n'
                 '[params."train.learning_rate"]\ntype = "float"\nlow = 0.001\nhigh = 0.1\nscale = "log"\n'
                 '[params."train.model.num_layers"]\ntype = "int"\nlow = 1\nhigh = 3\n')
    s = space.load(path)
    g = samplers.make(s)
    points = [g.propose(i) for i in range(g.total())]
    assert g.total() == 9
    assert [p["train.learning_rate"] for p in points[::3]] == [0.001, 0.01, 0.1]
    assert [p["train.model.num_layers"] for p in points[:3]] == [1, 2, 3]
    assert samplers.make(dataclasses.replace(s, max_trials=4)).total() == 4


def test_random_is_deterministic_per_trial_and_stays_in_range(tmp_path):
    s = space.load(SWEEP)
    a, b = samplers.make(s), samplers.make(s)
    draws = [a.propose(i) for i in range(50)]
    assert draws[7] == b.propose(7)  # trial 7 gets the same settings in a resumed sweep
    assert samplers.make(dataclasses.replace(s, seed=8)).propose(7) != draws[7]
    lrs = [d["train.learning_rate"] for d in draws]
    assert min(lrs) >= 0.0003 and max(lrs) <= 0.03
    assert sum(lr < 0.003 for lr in lrs) > 10  # log scale: the lower decade is sampled as often as the upper
    assert {d["train.batch_size"] for d in draws} == {128, 256, 512}
    assert all(isinstance(d["train.model.num_layers"], int) and 1 <= d["train.model.num_layers"] <= 4 for d in draws)


def test_bayesian_sampler_learns_from_told_and_from_earlier_runs():
    s = dataclasses.replace(space.load(SWEEP), algorithm="bayesian", max_trials=12)
    first = samplers.make(s)
    told = []
    for i in range(6):
        settings = first.propose(i)
        value = 1.0 - abs(settings["train.learning_rate"] - 0.01)
        first.tell(i, settings, "completed", value)
        told.append((settings, value))
    first.tell(6, first.propose(6), "failed", None)
    assert len(first.study.trials) == 7
    # A resumed sweep: trials of the earlier run are added to a fresh study.
    again = samplers.make(s)
    for i, (settings, value) in enumerate(told):
        again.tell(i, settings, "completed", value)
    assert len(again.study.trials) == 6 and again.study.best_value == max(v for _, v in told)
    assert set(again.propose(6)) == {p.key for p in s.params}


@pytest.mark.parametrize("own, others, goal, stop", [
    ([0.60, 0.62], [[0.80, 0.85], [0.79, 0.84], [0.7]], "maximize", True),
    ([0.60, 0.86], [[0.80, 0.85], [0.79, 0.84]], "maximize", False),  # its best beats the median
    ([0.60], [[0.80], [0.79]], "maximize", False),  # warm-up epoch
    ([0.60, 0.62], [[0.80, 0.85]], "maximize", False),  # too few others
    ([0.45, 0.46, 0.44], [[0.77], [0.78, 0.85]], "maximize", True),  # ahead of one: its latest value counts
    ([0.45, 0.79, 0.82], [[0.77], [0.78, 0.85]], "maximize", False),  # 0.82 beats the median of 0.77 and 0.85
    ([0.45, 0.46], [[], [0.78]], "maximize", False),  # a trial with no epoch yet does not count
    ([0.9, 0.8], [[0.5, 0.4], [0.6, 0.5]], "minimize", True),
])
def test_median_rule(own, others, goal, stop):
    assert should_stop(own, others, goal, warmup_epochs=1, min_trials=2) is stop


def test_metric_history_counts_a_resumed_epoch_once():
    lines = [{"epoch": 1, "val_auc": 0.7}, {"epoch": 2, "val_auc": 0.8}, {"epoch": 2, "val_auc": 0.81},
             {"epoch": 3, "loss": 0.3}]
    assert metric_history(lines, "val_auc") == [0.7, 0.81]


def _row(n, status, value, lr):
    return {"trial": n, "status": status, "value": value, "epochs_run": 3, "seconds": 10.0, "started": 1e9 + n,
            "finished": 1e9 + n + 10, "host": "h", "pid": 1, "error": None if status != "failed" else "boom",
            "settings": {"train.learning_rate": lr, "train.model.first_layer_size": 32,
                         "train.model.num_layers": 2, "train.batch_size": 256}}


def test_best_leaderboard_and_table(tmp_path):
    s = space.load(SWEEP)
    rows = [_row(1, "completed", 0.80, 0.01), _row(2, "failed", None, 0.02), _row(3, "completed", 0.85, 0.001),
            _row(4, "pruned", 0.90, 0.005), _row(5, "completed", 0.85, 0.003)]
    assert sweep_report.best(s, rows)["trial"] == 3  # pruned trials do not count; ties go to the earlier trial
    assert sweep_report.best(dataclasses.replace(s, goal="minimize"), rows)["trial"] == 1
    board = sweep_report.leaderboard(s, rows).splitlines()
    assert board[2].split()[:3] == ["1", "003", "0.8500"] and board[4].split()[:2] == ["3", "001"]
    assert "  pruned: 004" in board and "  failed: 002" in board
    storage = Storage(None)
    base = sweep_report.write_table(storage, storage.qualify(str(tmp_path)), s, rows)
    table = pd.read_parquet(f"{Storage.local(base)}.parquet")
    assert list(table["trial"]) == [1, 2, 3, 4, 5] and list(table["status"])[1] == "failed"
    assert list(table.columns[:4]) == ["trial", "status", "val_auc", "epochs_run"]
    assert table["learning_rate"].tolist() == [0.01, 0.02, 0.001, 0.005, 0.003]
    assert json.loads(table.to_json())["error"]["1"] == "boom"


def test_a_diverged_trial_counts_as_the_worst():
    nan = float("nan")
    assert should_stop([0.7, nan], [[0.6, 0.6], [0.6, 0.6]], "maximize", warmup_epochs=1, min_trials=2)  # diverged
    assert should_stop([nan], [], "maximize", warmup_epochs=1, min_trials=2)
    # others' NaNs are the worst too: the median of (nan, nan, 0.8) is nan -> -inf, nothing is below it
    assert not should_stop([0.5, 0.5], [[nan, nan], [nan, nan], [0.8, 0.8]], "maximize", warmup_epochs=1, min_trials=2)


def test_bayesian_resume_takes_nan_pruned_and_failed_trials():
    s = dataclasses.replace(space.load(SWEEP), algorithm="bayesian")
    first = samplers.make(s)
    outcomes = [("completed", 0.8), ("completed", float("nan")), ("pruned", 0.6), ("failed", None)]
    settings = [first.propose(i) for i in range(4)]
    again = samplers.make(s)
    for i, ((status, value), st) in enumerate(zip(outcomes, settings)):
        again.tell(i, st, status, value)
    states = [t.state.name for t in again.study.trials]
    assert states == ["COMPLETE", "FAIL", "PRUNED", "FAIL"] and again.study.best_value == 0.8
    live = samplers.make(s)
    for i, (status, value) in enumerate(outcomes):
        live.tell(i, live.propose(i), status, value)
    assert [t.state.name for t in live.study.trials] == states


def test_sweep_overrides_take_dotted_config_keys():
    s = space.load(SWEEP, ["params.train.learning_rate.high=0.5", "sweep.fixed.train.epochs=2", "sweep.max_trials=3"])
    lr = next(p for p in s.params if p.key == "train.learning_rate")
    assert lr.high == 0.5 and s.fixed["train.epochs"] == 2 and s.max_trials == 3


def test_lost_parameter_server_workers_are_tolerated_until_none_is_left():
    from tfos_jobs import control_channel as cc
    from tfos_jobs.config import TrainConfig
    from tfos_jobs.jobs.train.driver.run_state import RunState
    from tfos_jobs.jobs.train.driver.tf_cluster import LostWorkers
    from tfos_jobs.errors import TrainingError

    lines: list[str] = []
    run = RunState("r", 4, progress=None, transfers=None)
    lost = LostWorkers(TrainConfig(strategy="parameter_server", workers=2, reservation_timeout=0), run, lines.append)
    assert not lost.tolerated(1)  # a failed task, no worker reported lost, no time left to wait
    run.handle(cc.LOST, {cc.SENDER_NODE: "worker-1"})
    assert lost.tolerated(1) and lines == ["TF node worker-1 was lost with its executor; training goes on with 1 worker(s)"]
    assert not lost.tolerated(2)  # a second failure that is not a lost worker (e.g. the ps)
    run.handle(cc.LOST, {cc.SENDER_NODE: "worker-0"})
    with pytest.raises(TrainingError, match=r"all 2 parameter-server workers were lost .*worker-0, worker-1"):
        lost.tolerated(2)
    mwms = LostWorkers(TrainConfig(strategy="multi_worker_mirrored", workers=2), run, lines.append)
    assert not mwms.tolerated(1)
