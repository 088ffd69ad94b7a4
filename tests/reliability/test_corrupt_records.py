"""A damaged TFRecord file stops training with an error that names it."""
from __future__ import annotations

import shutil

import pytest

from tfos_jobs import config
from tfos_jobs.data import reader
from tfos_jobs.data import dataset as dataset_dir
from tfos_jobs.jobs.train.driver import job as train_job

from tests.conftest import CENSUS, prepared_dataset


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    return prepared_dataset(spark, tmp_path_factory.mktemp("corrupt"), 1500, 2.0, 3)


def damaged_copy(dataset, tmp_path, how: str):
    copy = tmp_path / "dataset"
    shutil.copytree(dataset, copy)
    victim = sorted((copy / "train").glob("part-*"))[1]
    data = bytearray(victim.read_bytes())
    if how == "truncate":
        data = data[: len(data) - 9]
    else:
        data[len(data) // 2] ^= 0xFF  # flips bits inside a record: its CRC no longer matches
    victim.write_bytes(bytes(data))
    return copy, victim


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_find_corrupt_names_the_damaged_file(dataset, tmp_path, how):
    copy, victim = damaged_copy(dataset, tmp_path, how)
    m = dataset_dir.read(str(copy))
    bad = reader.find_corrupt(m.files("train") + m.files("eval"))
    assert bad is not None and bad[0] == str(victim)
    assert reader.find_corrupt(dataset_dir.read(str(dataset)).files("train")) is None


def test_training_on_a_damaged_file_names_it(spark, dataset, tmp_path):
    copy, victim = damaged_copy(dataset, tmp_path, "flip")
    cfg = config.load(CENSUS, [f"train.dataset={copy}", f"train.model_dir={tmp_path / 'model'}", "train.strategy=local",
                               "train.epochs=1", "train.tensorboard=false"])
    with pytest.raises(train_job.TrainingError, match=f"corrupt TFRecord file: file:{victim}"):
        train_job.run(spark, cfg, log=lambda _: None)
