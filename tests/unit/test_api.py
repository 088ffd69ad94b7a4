"""The Python API's checks that need no Spark: model resolution, configs as tables, bad arguments."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from tfos_jobs import api, config
from tfos_jobs.api import serving, training
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.contracts.prediction import PredictionSummary, summary_file
from tfos_jobs.errors import ConfigError
from tfos_jobs.model.builder import build_model, kind_of
from tfos_jobs.config import sweep as sweep_file
from tfos_jobs.search import space

from tests.conftest import CENSUS, ROOT


def test_import_tfos_jobs_loads_neither_spark_nor_tensorflow():
    code = "import sys, tfos_jobs; print('pyspark' in sys.modules, 'tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "False"]
    import tfos_jobs

    assert tfos_jobs.TrainResult is api.TrainResult and tfos_jobs.api is api


def test_a_callable_of_an_importable_module_goes_by_name_one_of_a_script_by_value():
    assert kind_of("wide_deep") == ("wide_deep", None)
    assert kind_of(build_model) == ("tfos_jobs.model.builder:build_model", None)

    def local_build(spec, vocab, stats, model_cfg):
        return None

    kind, fn = kind_of(local_build)
    assert fn is local_build and kind.endswith("local_build")
    with pytest.raises(ConfigError, match="build= must be"):
        kind_of(42)


def test_a_config_as_tables_reads_back_the_same_config():
    cfg = config.load(CENSUS, ["train.epochs=3"])
    assert config.from_dict(config.to_dict(cfg)) == cfg


def test_typed_settings_change_a_config_as_its_file_would():
    cfg = config.load(CENSUS)
    changed = cfg.with_settings({"train.learning_rate": 0.01, "train.model.num_layers": 2,
                                 "spark.conf.spark.sql.shuffle.partitions": 4, "features.age.default": 30.0})
    assert changed == config.load(CENSUS, ["train.learning_rate=0.01", "train.model.num_layers=2",
                                           "spark.conf.spark.sql.shuffle.partitions=4", "features.age.default=30.0"])
    assert changed.train.learning_rate == 0.01 and changed.spark.conf["spark.sql.shuffle.partitions"] == "4"
    assert cfg.train.learning_rate != 0.01  # the config it came from is left as it was
    with pytest.raises(ConfigError, match="train.epochs: must be >= 1"):
        cfg.with_settings({"train.epochs": 0})
    with pytest.raises(ConfigError, match="train.learning_rate: expected a number, got 'fast'"):
        cfg.with_settings({"train.learning_rate": "fast"})
    with pytest.raises(ConfigError, match="train.epochs.x: train.epochs is a value, not a table"):
        cfg.with_settings({"train.epochs.x": 1})


def test_a_sweep_built_in_code_is_checked_as_the_sweep_file_is():
    params = (sweep_file.Param(key="train.learning_rate", type="float", low=1e-4, high=1e-2, scale="log"),)
    typed = sweep_file.SweepConfig(dir="out/sweep", max_trials=2, params=params)
    tables = {"sweep": {"dir": "out/sweep", "max_trials": 2},
              "params": {"train.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "scale": "log"}}}
    assert sweep_file.checked(typed) == sweep_file.from_tables(tables) == typed
    with pytest.raises(ConfigError, match="params.train.learning_rate: low 0.1 is above high 0.01"):
        sweep_file.checked(dataclasses.replace(typed, params=(dataclasses.replace(params[0], low=0.1),)))
    with pytest.raises(ConfigError, match="sweep.max_trials: expected an integer, got '2'"):
        sweep_file.checked(dataclasses.replace(typed, max_trials="2"))  # type: ignore[arg-type]
    bad = dataclasses.replace(typed, params=(sweep_file.Param(key="train.epochs", type="int", low=0, high=2),))
    with pytest.raises(ConfigError, match="train.epochs: must be >= 1"):
        space.trial_models(config.load(CENSUS), bad)


def test_prepare_refuses_missing_inputs_before_any_spark_job():
    spec = config.load(CENSUS).features
    with pytest.raises(ConfigError, match="give spec="):
        api.prepare(None, output="out")
    with pytest.raises(ConfigError, match="give tables="):
        api.prepare(None, spec=spec, output="out")
    with pytest.raises(ConfigError, match="main= must name the table of rows, one of: a, b"):
        api.prepare(None, spec=spec, tables={"a": None, "b": None}, output="out")
    with pytest.raises(ConfigError, match=r"features.age.kind: 'number' is not one of"):
        api.prepare(None, spec={"age": {"kind": "number"}}, tables={"a": None}, output="out")


def test_a_model_directory_is_found_from_its_saved_model_and_nothing_else():
    assert ModelDir.holding("hdfs://nn:8020/models/income/saved_model/").path == "hdfs://nn:8020/models/income"
    assert ModelDir.holding("file:/out/model/saved_model").saved_model == "file:/out/model/saved_model"
    for wrong in ("file:/out/model", "saved_model", "file:/out/model/saved_model/variables"):
        with pytest.raises(ValueError, match="is not the saved_model/ of a model directory"):
            ModelDir.holding(wrong)


def test_a_prediction_summary_reads_back_from_the_file_it_writes():
    summary = PredictionSummary(output="s3a://bucket/scores", mode="append", rows=1200, model="s3a://bucket/m/1",
                                counts={"rows": 1200, "null:age": 3}, seconds=4.2)
    assert PredictionSummary.from_json(summary.to_json()) == summary
    assert summary_file("s3a://bucket/scores/") == "s3a://bucket/scores/_prediction.json"


def test_the_steps_take_what_the_step_before_returned():
    result = api.TrainResult(metrics={}, kept_epoch=None, epochs=1, model_dir="hdfs://nn/model",
                             saved_model="hdfs://nn/model/saved_model", nodes=(), seconds=1.0, attempts=1,
                             strategy="local")
    assert serving._model_dir(result) == "hdfs://nn/model" and serving._model_dir("models:/income@champion") == "models:/income@champion"
    assert set(api.__all__) <= set(dir(api)) and "predict" in api.__all__


def test_each_training_setting_comes_one_way():
    from tfos_jobs.config import ModelConfig, TrainConfig

    given = training._with_handles(TrainConfig(epochs=3), dataset="hdfs://nn/d", model_dir="hdfs://nn/m", kind=None,
                              from_config=True, where="train()")
    assert (given.dataset, given.model_dir, given.model.kind, given.epochs) == ("hdfs://nn/d", "hdfs://nn/m",
                                                                                 "wide_deep", 3)
    own = TrainConfig(dataset="d1", model_dir="m1", model=ModelConfig(kind="mymodels:build"))
    taken = training._with_handles(own, dataset=None, model_dir=None, kind=None, from_config=True, where="train")
    assert (taken.dataset, taken.model_dir, taken.model.kind) == ("d1", "m1", "mymodels:build")
    assert training._with_handles(own, dataset="d1", model_dir="m1", kind="mymodels:build", from_config=True,
                             where="train") == taken  # the same value both ways is one value
    with pytest.raises(ConfigError, match=r"train\(\): dataset is given twice, 'd2' as an argument and 'd1'"):
        training._with_handles(own, dataset="d2", model_dir=None, kind=None, from_config=True, where="train()")
    with pytest.raises(ConfigError, match="model.kind is given twice, 'other:build' as an argument"):
        training._with_handles(own, dataset=None, model_dir=None, kind="other:build", from_config=True, where="train()")
    with pytest.raises(ConfigError, match=r"train\(\): give model_dir= \(or a config= that names it\)"):
        training._with_handles(TrainConfig(), dataset="d", model_dir=None, kind=None, from_config=False, where="train()")


def test_a_setting_built_in_code_is_checked_as_a_file_is():
    from tfos_jobs.config import ModelConfig, TrainConfig
    from tfos_jobs.config.loading import as_loaded

    assert as_loaded(TrainConfig(learning_rate=1), "train").learning_rate == 1.0  # a number, as TOML's 1 reads
    with pytest.raises(ConfigError, match="train.epochs: expected an integer, got '3'"):
        as_loaded(TrainConfig(epochs="3"), "train")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="train.model.units: expected an integer, got 1.5"):
        as_loaded(TrainConfig(model=ModelConfig(units=1.5)), "train")  # type: ignore[arg-type]


def test_a_model_checked_against_the_configs_spec_holds_for_the_datasets():
    """`tfos train` builds the model before Spark starts, against the config's spec; training
    does not build it again against the dataset's, which differs only in its resolved defaults."""
    from tfos_jobs.config.loading import build_spec
    from tfos_jobs.model.builder import check_build

    cfg = config.load(CENSUS)
    model = check_build(model_cfg=cfg.train.model, spec=cfg.features)
    features = config.to_dict(cfg)["features"]
    resolved = {name: {**body, "default": 41.5} if body.get("default") == "mean" else body
                for name, body in features.items()}
    assert resolved != features and model.holds_for(cfg.train.model, build_spec(resolved))
    fewer = {name: body for name, body in features.items() if name != "hours_per_week"}
    assert not model.holds_for(cfg.train.model, build_spec(fewer))
    assert not model.holds_for(dataclasses.replace(cfg.train.model, num_layers=2), cfg.features)


def test_a_session_starts_with_the_configs_spark_settings_and_its_gpus(monkeypatch):
    """`api.session(config=...)`, what every `tfos` command starts: the config's `[spark]` (with
    `conf` added) and, for `train.gpus_per_worker`, Spark's GPU settings, which must be there as
    the context starts; a `TrainConfig` gives only the GPUs. Nothing starts here."""
    from tfos_jobs import session_builder
    from tfos_jobs.config import SparkConfig, TrainConfig

    started = []
    monkeypatch.setattr(session_builder, "build", lambda spark_cfg, extra=None: started.append((spark_cfg, extra)))
    gpus = config.load(CENSUS, ["train.gpus_per_worker=2", "train.gpu_discovery_script=/opt/gpus.sh",
                                "spark.master=local-cluster[2,1,1024]"])
    api.session(config=gpus, conf={"spark.sql.shuffle.partitions": "3"})
    spark_cfg, extra = started[-1]
    assert spark_cfg.master == "local-cluster[2,1,1024]"
    assert dict(spark_cfg.conf) == {**gpus.spark.conf, "spark.sql.shuffle.partitions": "3"}
    assert extra["spark.executor.resource.gpu.amount"] == extra["spark.task.resource.gpu.amount"] == "2"
    assert extra["spark.executor.resource.gpu.discoveryScript"] == "/opt/gpus.sh"
    api.session(master="local[3]", config=TrainConfig(gpus_per_worker=1))
    assert started[-1][0] == SparkConfig(master="local[3]") and started[-1][1]["spark.task.resource.gpu.amount"] == "1"
    api.session(config=config.load(CENSUS))
    assert started[-1][1] == {}  # no GPUs asked, none set
    with pytest.raises(ConfigError, match=r"session\(\): master, app_name, packages, hive and remote come from"):
        api.session(master="local[4]", config=gpus)
