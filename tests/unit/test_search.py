"""The sweep file, Optuna's samplers, pruners and study as the sweep uses them, and the
results table (no Spark, no TF)."""
from __future__ import annotations

import dataclasses
import json
import math
import warnings

import optuna
import pandas as pd
import pytest

from tfos_jobs.jobs.sweep.driver import report as sweep_report
from tfos_jobs.errors import ConfigError
from tfos_jobs.storage import Storage
from tfos_jobs import config
from tfos_jobs.config import sweep as sweep_file
from tfos_jobs.search import samplers, space
from tfos_jobs.search.study import TRIAL_ATTR, StudyPlace, SweepStudy, default_name, mask
from tfos_jobs.contracts.trial import TrialStatus
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.search.trials import metric_history, summarise

from tests.conftest import CENSUS, ROOT

SWEEP = ROOT / "conf" / "sweep.toml"


def write(tmp_path, text: str):
    path = tmp_path / "sweep.toml"
    path.write_text('[sweep]\ndir = "out"\n' + text)
    return path


def test_the_shipped_sweep_file_is_valid_against_the_census_config():
    s = sweep_file.load(SWEEP)
    assert len(space.trial_models(config.load(CENSUS), s)) == 4  # the settings of each value checked as a config's
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
    ('early_stopping = "patience"\n[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n',
     "sweep.early_stopping: 'patience' is not one of: median, percentile, hyperband"),
    ('goal = "max"\n[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n', "sweep.goal: 'max' is not one of: maximize"),
    ('max_trials = "8"\n[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n',
     "sweep.max_trials: expected an integer, got '8'"),
    ('[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\nstep = 0\n', "params.train.epochs.step: a positive integer"),
    ('percentile = 100.0\n[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n', "sweep.percentile: 100.0"),
    ('storage = "study.db"\n[params."train.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n',
     "sweep.storage: not an SQLAlchemy URL"),
    ('', "no parameters"),
])
def test_sweep_file_errors_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=None) as err:
        sweep_file.load(write(tmp_path, text))
    assert message in str(err.value)


def test_a_value_the_training_config_refuses_is_named_before_any_trial(tmp_path):
    census = config.load(CENSUS)
    path = write(tmp_path, '[params."train.optimizer"]\ntype = "categorical"\nvalues = ["adam", "adamw2"]\n')
    with pytest.raises(ConfigError) as err:
        space.trial_models(census, sweep_file.load(path))
    assert 'train.optimizer="adamw2"' in str(err.value) and "train.optimizer: 'adamw2'" in str(err.value)
    path = write(tmp_path, '[params."train.modle.num_layers"]\ntype = "int"\nlow = 1\nhigh = 2\n')
    with pytest.raises(ConfigError) as err:
        space.trial_models(census, sweep_file.load(path))
    assert "train.modle: unknown key" in str(err.value)


def line(epoch: int, epochs: int = 3, seconds: float = 1.0, **metrics: float) -> EpochLine:
    """A finished epoch with these metrics (the bookkeeping as a short epoch's)."""
    return EpochLine(epoch, epochs, seconds=seconds, eval_seconds=0.25, examples_per_sec=100.0, time=1e9 + epoch,
                     metrics=metrics)


def test_metric_history_counts_a_resumed_epoch_once():
    lines = [line(1, val_auc=0.7), line(2, val_auc=0.8), line(2, val_auc=0.81), line(3, loss=0.3)]
    assert metric_history(lines, "val_auc") == [0.7, 0.81]


def test_a_trial_that_keeps_its_lowest_val_loss_epoch_is_ranked_by_that_epoch():
    lines = [line(1, val_loss=0.40, val_auc=0.80), line(2, val_loss=0.31, val_auc=0.86),
             line(3, val_loss=0.35, val_auc=0.88), line(3, val_loss=0.33, val_auc=0.87)]
    last = summarise(lines, "val_auc", TrialStatus.COMPLETED, None)
    assert last["value"] == 0.87 and last["metrics"]["val_loss"] == 0.33  # a resumed epoch: its last line
    kept = summarise(lines, "val_auc", TrialStatus.COMPLETED, None, kept_at_lowest="val_loss")
    assert kept["value"] == 0.86 and kept["metrics"]["val_loss"] == 0.31 and kept["epochs_run"] == 3


def _row(n, status, value, lr):
    return {"trial": n, "status": status, "value": value, "epochs_run": 3, "seconds": 10.0, "started": 1e9 + n,
            "finished": 1e9 + n + 10, "host": "h", "pid": 1, "error": None if status != "failed" else "boom",
            "settings": {"train.learning_rate": lr, "train.model.first_layer_size": 32,
                         "train.model.num_layers": 2, "train.batch_size": 256}}


def test_best_leaderboard_and_table(tmp_path):
    s = sweep_file.load(SWEEP)
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


def test_sweep_overrides_take_dotted_config_keys():
    s = sweep_file.load(SWEEP, ["params.train.learning_rate.high=0.5", "sweep.fixed.train.epochs=2", "sweep.max_trials=3"])
    lr = next(p for p in s.params if p.key == "train.learning_rate")
    assert lr.high == 0.5 and s.fixed["train.epochs"] == 2 and s.max_trials == 3


# -- Optuna: samplers, pruners, the study ------------------------------------------------------

def grid_sweep(tmp_path, **changes) -> sweep_file.SweepConfig:
    path = write(tmp_path, 'algorithm = "grid"\nmax_trials = 100\n'
                 '[params."train.learning_rate"]\ntype = "float"\nlow = 0.001\nhigh = 0.1\nscale = "log"\n'
                 '[params."train.model.num_layers"]\ntype = "int"\nlow = 1\nhigh = 3\n')
    return dataclasses.replace(sweep_file.load(path), **changes)


def open_study(tmp_path, sweep: sweep_file.SweepConfig, name: str = "s", fingerprint: str = "f") -> SweepStudy:
    storage = Storage(None)
    place = StudyPlace(storage, sweep, storage.qualify(str(tmp_path / "sweep")))
    return SweepStudy.open(place, sweep, name, fingerprint, max_epochs=4, log=lambda line: None)


def row(n: int, status: str, value, settings: dict) -> dict:
    return {"trial": n, "status": status, "value": value, "settings": settings,
            "error": "boom" if status == "failed" else None}


def test_grid_runs_every_point_once_in_an_order_drawn_from_the_seed(tmp_path):
    s = grid_sweep(tmp_path)
    assert samplers.total(s) == 9 and samplers.total(dataclasses.replace(s, max_trials=4)) == 4
    study = open_study(tmp_path / "a", s)
    points = [study.start(n) for n in range(1, 10)]
    assert {(p["train.learning_rate"], p["train.model.num_layers"]) for p in points} == {
        (lr, layers) for lr in (0.001, 0.01, 0.1) for layers in (1, 2, 3)}
    again = open_study(tmp_path / "b", s)
    assert [again.start(n) for n in range(1, 10)] == points  # the same seed, the same order
    assert isinstance(samplers.sampler(s, 1), optuna.samplers.GridSampler)


def test_random_draws_the_same_settings_for_the_same_trial_number(tmp_path):
    s = sweep_file.load(SWEEP)
    study = open_study(tmp_path / "a", s)
    draws = [study.start(n) for n in range(1, 51)]
    assert open_study(tmp_path / "b", s).start(7) == draws[6]  # a resumed sweep's trial 7
    assert open_study(tmp_path / "c", dataclasses.replace(s, seed=8)).start(7) != draws[6]
    lrs = [d["train.learning_rate"] for d in draws]
    assert min(lrs) >= 0.0003 and max(lrs) <= 0.03
    assert sum(lr < 0.003 for lr in lrs) > 10  # log scale: the lower decade is sampled as often as the upper
    assert {d["train.batch_size"] for d in draws} == {128, 256, 512}
    assert all(isinstance(d["train.model.num_layers"], int) and 1 <= d["train.model.num_layers"] <= 4 for d in draws)


@pytest.mark.parametrize("algorithm, kind", [
    ("random", optuna.samplers.RandomSampler), ("tpe", optuna.samplers.TPESampler),
    ("bayesian", optuna.samplers.TPESampler), ("cmaes", optuna.samplers.CmaEsSampler)])
def test_each_algorithm_is_optunas_sampler(algorithm, kind):
    s = dataclasses.replace(sweep_file.load(SWEEP), algorithm=algorithm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # TPE's constant liar is experimental: its warning is silenced
        assert isinstance(samplers.sampler(s, 1), kind)


def test_tpe_learns_from_the_trials_told(tmp_path):
    s = dataclasses.replace(sweep_file.load(SWEEP), algorithm="tpe", max_trials=12)
    study = open_study(tmp_path, s)
    for n in range(1, 7):
        settings = study.start(n)
        study.finish(row(n, "completed", 1.0 - abs(settings["train.learning_rate"] - 0.01), settings))
    assert study.study.best_value == max(t.value for t in study.study.trials)
    assert set(study.start(7)) == {p.key for p in s.params}


def test_cmaes_draws_categorical_parameters_at_random_without_warning_each_trial(tmp_path, caplog):
    s = dataclasses.replace(sweep_file.load(SWEEP), algorithm="cmaes")
    assert samplers.independent_params(s) == ["train.batch_size"]
    study = open_study(tmp_path, s)
    optuna.logging.enable_propagation()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for n in range(1, 5):
                settings = study.start(n)
                study.finish(row(n, "completed", settings["train.learning_rate"], settings))
    finally:
        optuna.logging.disable_propagation()
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    one = dataclasses.replace(s, params=s.params[:1])  # CMA-ES needs two numeric parameters
    assert samplers.independent_params(one) == ["train.learning_rate"]


@pytest.mark.parametrize("name, kind", [
    ("median", optuna.pruners.MedianPruner), ("percentile", optuna.pruners.PercentilePruner),
    ("hyperband", optuna.pruners.HyperbandPruner), ("successive_halving", optuna.pruners.SuccessiveHalvingPruner),
    ("none", optuna.pruners.NopPruner)])
def test_each_early_stopping_is_optunas_pruner(name, kind):
    s = dataclasses.replace(sweep_file.load(SWEEP), early_stopping=name, warmup_epochs=2, min_trials=2, percentile=40.0)
    pruner = samplers.pruner(s, max_epochs=9)
    assert isinstance(pruner, kind)
    if name == "percentile":
        assert (pruner._percentile, pruner._n_warmup_steps, pruner._n_min_trials) == (40.0, 2, 2)
    if name == "hyperband":
        assert (pruner._min_resource, pruner._max_resource) == (2, 9)


def test_hyperband_runs_up_to_the_most_epochs_a_trial_takes():
    s = sweep_file.load(SWEEP)
    assert space.largest(s, "train.epochs", 10) == 4  # sweep.fixed
    searched = dataclasses.replace(s, fixed={}, params=(*s.params, sweep_file.Param("train.epochs", "int", 2, 6)))
    assert space.largest(searched, "train.epochs", 10) == 6
    assert space.largest(dataclasses.replace(s, fixed={}), "train.epochs", 10) == 10


def test_median_pruner_judges_epochs_after_the_warmup_against_completed_trials(tmp_path):
    s = dataclasses.replace(sweep_file.load(SWEEP), algorithm="random", early_stopping="median", warmup_epochs=2,
                            min_trials=1)
    study = open_study(tmp_path, s)
    good, bad, diverged = study.start(1), study.start(2), study.start(3)
    assert not study.should_prune(2, 1, 0.5)  # no completed trial yet
    for epoch, value in enumerate([0.7, 0.8, 0.85], 1):
        study.report(1, epoch, value)
    study.report(1, 3, 0.1)  # an epoch already reported keeps its value
    study.finish(row(1, "completed", 0.85, good))
    assert not study.should_prune(2, 1, 0.5)  # epoch 1 is within the warm-up
    assert study.should_prune(2, 2, 0.55)
    assert study.should_prune(3, 1, math.nan)  # a diverged trial stops whatever the warm-up
    study.finish(row(2, "pruned", 0.55, bad))
    study.finish(row(3, "pruned", math.nan, diverged))
    states = {t.user_attrs[TRIAL_ATTR]: (t.state.name, t.intermediate_values) for t in study.study.trials}
    assert states[1] == ("COMPLETE", {1: 0.7, 2: 0.8, 3: 0.85})
    assert states[2] == ("PRUNED", {1: 0.5, 2: 0.55}) and states[3][0] == "PRUNED"
    assert not open_study(tmp_path / "n", dataclasses.replace(s, early_stopping="none")).should_prune(1, 3, math.nan)


def test_a_resumed_sweep_reuses_the_running_trials_and_teaches_a_new_study_the_finished_ones(tmp_path):
    s = dataclasses.replace(sweep_file.load(SWEEP), algorithm="tpe", early_stopping="median", min_trials=1)
    study = open_study(tmp_path, s)
    settings = {n: study.start(n) for n in (1, 2, 3, 4)}
    study.report(1, 1, 0.8)
    study.report(1, 2, 0.85)
    study.finish(row(1, "completed", 0.85, settings[1]))
    study.finish(row(2, "failed", None, settings[2]))  # e.g. a combination the config refuses
    study.report(3, 1, 0.75)
    study.finish(row(3, "cancelled", None, settings[3]))  # stopped by the time budget: stays RUNNING
    running = study.study.trials[2]
    # the next run: trials 3 and 4 (4 never reported back) run again on their own Optuna trials
    again = open_study(tmp_path, s)
    assert again.start(3, settings[3]) == settings[3] and again.start(4) == settings[4]
    assert again.should_prune(3, 2, 0.1)  # report and should_prune work on the reused trial
    again.finish(row(3, "pruned", 0.1, settings[3]))
    trials = again.study.trials
    assert len(trials) == 4 and trials[2].number == running.number
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "PRUNED", "RUNNING"]
    assert trials[1].user_attrs["error"] == "boom" and trials[2].intermediate_values == {1: 0.75, 2: 0.1}
    # a study that lost them (another storage or name): the finished trials are added, once
    results = {1: row(1, "completed", 0.85, settings[1]), 2: row(2, "failed", None, settings[2]),
               3: row(3, "pruned", 0.1, settings[3])}
    fresh = open_study(tmp_path, s, name="elsewhere")
    assert fresh.restore(results, {1: [line(1, val_auc=0.8)]}) == 3
    assert fresh.restore(results, {}) == 0
    assert [(t.user_attrs[TRIAL_ATTR], t.state.name) for t in fresh.study.trials] == [
        (1, "COMPLETE"), (2, "FAIL"), (3, "PRUNED")]
    assert fresh.study.trials[0].intermediate_values == {1: 0.8} and fresh.study.best_value == 0.85
    assert fresh.start(4, settings[4]) == settings[4]  # started before, unknown to this study
    assert fresh.study.trials[3].state.name == "RUNNING"


def test_a_study_refuses_another_sweep_and_names_the_settings(tmp_path):
    s = sweep_file.load(SWEEP)
    open_study(tmp_path, s, fingerprint="one")
    open_study(tmp_path, s, fingerprint="one")  # the same sweep resumes
    with pytest.raises(ConfigError) as err:
        open_study(tmp_path, s, fingerprint="two")
    assert "belongs to another sweep" in str(err.value)
    assert "sweep.study_name" in str(err.value) and "sweep.storage" in str(err.value)
    with pytest.raises(ConfigError, match="belongs to another sweep"):  # made by something else, with trials
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(
            str(tmp_path / "sweep" / "study.journal")))
        optuna.create_study(study_name="theirs", storage=storage).add_trial(
            optuna.trial.create_trial(value=1.0, params={}, distributions={}))
        open_study(tmp_path, s, name="theirs")


def test_the_fingerprint_leaves_out_limits_and_where_the_study_is_kept():
    s = sweep_file.load(SWEEP)
    same = dataclasses.replace(s, max_trials=50, time_budget_seconds=9, storage="sqlite:///x.db", study_name="n",
                               percentile=50.0)
    assert same.fingerprint() == s.fingerprint()
    assert dataclasses.replace(s, algorithm="bayesian").fingerprint() == dataclasses.replace(s, algorithm="tpe").fingerprint()
    pct = dataclasses.replace(s, early_stopping="percentile")
    assert dataclasses.replace(pct, percentile=50.0).fingerprint() != pct.fingerprint()
    assert default_name("file:/data/sweeps/census/", "0123456789abcdef") == "census-01234567"


def test_the_study_is_kept_in_the_sweep_dir_or_at_a_url(tmp_path):
    storage = Storage(None)
    s = sweep_file.load(SWEEP)
    local = StudyPlace(storage, s, storage.qualify(str(tmp_path / "sweep")))
    assert local.journal == str(tmp_path / "sweep" / "study.journal") and local.remote is None
    assert isinstance(local.optuna_storage(), optuna.storages.JournalStorage)
    url = f"sqlite:///{tmp_path}/study.db"
    place = StudyPlace(storage, dataclasses.replace(s, storage=url), storage.qualify(str(tmp_path / "sweep")))
    assert place.journal is None and place.shown == url
    study = SweepStudy.open(place, dataclasses.replace(s, storage=url), "db", "f", 4)
    study.start(1)
    assert len(optuna.load_study(study_name="db", storage=url).trials) == 1


class RemoteStorage:
    """A sweep directory on a filesystem that is not local (hdfs://, s3a://), kept in a dict."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files

    def exists(self, path):
        return path in self.files

    def on_this_host(self, path):
        return None

    def download(self, remote, local_path):
        with open(local_path, "wb") as fh:
            fh.write(self.files[remote])

    def upload_file(self, local_file, remote):
        with open(local_file, "rb") as fh:
            self.files[remote] = fh.read()


def test_a_sweep_dir_elsewhere_keeps_a_local_copy_of_the_journal(tmp_path):
    s = sweep_file.load(SWEEP)
    remote = RemoteStorage({})
    place = StudyPlace(remote, s, "hdfs://nn/sweeps/a")
    study = SweepStudy.open(place, s, "a", "f", 4)
    settings = study.start(1)
    study.finish(row(1, "completed", 0.8, settings))
    place.save()
    assert list(remote.files) == ["hdfs://nn/sweeps/a/study.journal"]
    place.close()
    again = StudyPlace(remote, s, "hdfs://nn/sweeps/a")  # the next run starts from the sweep dir's copy
    assert [t.state.name for t in SweepStudy.open(again, s, "a", "f", 4).study.trials] == ["COMPLETE"]
    again.close()


def test_a_storage_password_is_never_shown(tmp_path):
    from tfos_jobs.jobs.sweep.driver.job import definition

    url = "postgresql+psycopg2://sweeper:s3cret@127.0.0.1:1/optuna"
    assert mask(url) == "postgresql+psycopg2://sweeper:***@127.0.0.1:1/optuna"
    s = dataclasses.replace(sweep_file.load(SWEEP), storage=url)
    assert "s3cret" not in json.dumps(definition(s, "f", "n", {}), default=str)
    place = StudyPlace(Storage(None), s, "file:/unused")
    assert "s3cret" not in place.shown
    with pytest.raises(ConfigError) as err:  # nothing listens there: the error names the URL, masked
        SweepStudy.open(place, s, "n", "f", 4)
    assert "s3cret" not in str(err.value) and "sweeper:***@127.0.0.1" in str(err.value)


def test_an_observer_that_raises_is_a_warning(tmp_path):
    from tfos_jobs.jobs.sweep.driver.observer import Guarded, SweepObserver

    class Broken(SweepObserver):
        def trial_epoch(self, number, line):
            raise RuntimeError("tracking server down")

    lines: list[str] = []
    notify = Guarded(Broken(), lines.append)
    notify(SweepObserver.trial_started, 1, {"train.learning_rate": 0.01})  # the base class's no-op
    notify(SweepObserver.trial_epoch, 1, line(1, loss=0.5))
    assert lines == ["warning: the sweep observer's trial_epoch failed (RuntimeError: tracking server down); "
                     "the sweep goes on"]
    Guarded(None, lines.append)(SweepObserver.sweep_finished, None, [], None)  # no observer: nothing called
    assert len(lines) == 1


def test_a_lone_node_asks_its_run_whether_to_stop():
    from tfos_jobs import control_channel as cc
    from tfos_jobs.cluster.driver.run_state import RunState

    asked = []
    state = RunState("r", 1, progress=None, transfers=None, lone=True,
                     judge=lambda epoch, metrics: asked.append((epoch, metrics)) or metrics["val_auc"] < 0.5)
    assert state.handle(cc.SHOULD_PRUNE, {cc.SENDER_NODE: "chief-0", "epoch": 2, "metrics": {"val_auc": 0.4}}) is True
    assert state.handle(cc.SHOULD_PRUNE, {cc.SENDER_NODE: "chief-0", "epoch": 3, "metrics": {"val_auc": 0.9}}) is False
    assert asked == [(2, {"val_auc": 0.4}), (3, {"val_auc": 0.9})]
    with pytest.raises(cc.ControlError, match="epoch from 1"):
        state.handle(cc.SHOULD_PRUNE, {cc.SENDER_NODE: "chief-0", "epoch": 0, "metrics": {"val_auc": 0.4}})
    with pytest.raises(cc.ControlError, match="metrics as numbers"):
        state.handle(cc.SHOULD_PRUNE, {cc.SENDER_NODE: "chief-0", "epoch": 1, "metrics": {"val_auc": "high"}})
    unjudged = RunState("r", 1, progress=None, transfers=None)
    assert unjudged.handle(cc.SHOULD_PRUNE, {cc.SENDER_NODE: "chief-0", "epoch": 1, "metrics": {}}) is False


def test_a_study_made_beforehand_with_enqueued_settings_runs_them_first(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    s = dataclasses.replace(sweep_file.load(SWEEP), storage=url)
    made = optuna.create_study(study_name="mine", storage=url, direction="maximize")
    first = {"train.learning_rate": 0.01, "train.model.first_layer_size": 64, "train.model.num_layers": 2,
             "train.batch_size": 256}
    made.enqueue_trial(first)
    study = SweepStudy.open(StudyPlace(Storage(None), s, "file:/unused"), s, "mine", "f", 4)
    assert study.start(1) == first and study.start(2) != first
