"""A small dataset and a model trained on it (local strategy), shared by the serving tests.

Two numeric features use the embedded encodings (periodic, piecewise-linear over quantile bins),
and occupation (in every cross) is hashed into ids rather than looked up in a
vocabulary, so every serving path is checked on them too."""
from __future__ import annotations

import dataclasses

import pytest

from tfos_jobs import config
from tfos_jobs.data import synthetic
from tfos_jobs.data.assemble import assemble
from tfos_jobs.jobs import prepare
from tfos_jobs.jobs.train.driver import job as train_job

from tests.conftest import CENSUS, census_overrides

PEOPLE = 3000
HASH_BUCKETS = 16


@pytest.fixture(scope="session")
def setup(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    raw, out, model = root / "raw", root / "dataset", root / "model"
    synthetic.generate(spark, str(raw), PEOPLE, 5.0, 11, "2026-01-01")
    cfg = config.load(CENSUS, census_overrides(raw, out, PEOPLE) + [
        f"train.dataset={out}", f"train.model_dir={model}", "train.strategy=local", "train.epochs=2",
        "train.batch_size=128", "train.tensorboard=false", f"predict.model={model}", f"predict.output={root / 'pred'}",
        "features.capital_gain.encoding=periodic", "features.age.encoding=piecewise_linear", "features.age.bins=8",
        f"features.occupation.hash_buckets={HASH_BUCKETS}"])
    prepare.run(spark, cfg)
    train_job.run(spark, cfg, log=lambda _: None)
    features, _ = assemble(spark, cfg, for_prediction=True)
    return cfg, model, features.cache()


@pytest.fixture(scope="session")
def codes_setup(spark, setup, tmp_path_factory):
    """The same data and model without the text and list features (one value a row): a wide & deep model that also
    takes its categories as codes (`serving_codes`); its config, model directory and rows to score."""
    from benchmarks.context import one_value_a_row

    cfg, _, _ = setup
    root = tmp_path_factory.mktemp("codes")
    model = root / "model"
    one = one_value_a_row(cfg)
    one = dataclasses.replace(
        one, prepare=dataclasses.replace(one.prepare, output=str(root / "dataset")),
        train=dataclasses.replace(one.train, dataset=str(root / "dataset"), model_dir=str(model)),
        predict=dataclasses.replace(one.predict, model=str(model)))
    prepare.run(spark, one)
    train_job.run(spark, one, log=lambda _: None)
    features, _ = assemble(spark, one, for_prediction=True)
    return one, model, features.cache()


@pytest.fixture(scope="session")
def bag_model(tmp_path_factory):
    """A model of a text, a list, a vector, a categorical and a number (tests/unit/test_bag_model.py's), exported
    beside its dataset's `_meta/`: its model directory."""
    from tests.unit.test_bag_model import export, train

    return export(train(), tmp_path_factory.mktemp("bag-model")).parent


@pytest.fixture(scope="session")
def second_model(spark, setup, tmp_path_factory):
    """Another model of the same spec (one epoch, another seed): different numbers, for swaps."""
    cfg, _, _ = setup
    model = tmp_path_factory.mktemp("second") / "model"
    train_job.run(spark, dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, model_dir=str(model), epochs=1, seed=cfg.train.seed + 1)), log=lambda _: None)
    return model
