"""Every shipped sample config serves the model it trains, under the SQL name its docs and
queries use."""
from __future__ import annotations

import pytest

from tfos_jobs import config, resources

from tests.conftest import ROOT

SAMPLES = [name for name in resources.sample_configs() if name != "sweep"]  # sweep.toml is a sweep file
DOCUMENTED = "\n".join(p.read_text() for p in [*(ROOT / "docs").glob("*.md"), *(ROOT / "conf" / "queries").glob("*.sql")])


def test_every_sample_is_checked():
    assert {"adult", "census", "census_warehouse", "fleet", "sensors", "tate"} <= set(SAMPLES)


@pytest.mark.parametrize("name", SAMPLES)
def test_a_sample_serves_the_model_it_trains_under_its_documented_name(name):
    cfg = config.load(resources.config_path(name))
    assert cfg.predict.model == cfg.train.model_dir, name
    assert f"`{cfg.predict.name}`" in DOCUMENTED or f"{cfg.predict.name}(" in DOCUMENTED, (name, cfg.predict.name)


def test_no_two_samples_write_the_same_predictions():
    outputs = [config.load(resources.config_path(name)).predict.output for name in SAMPLES]
    assert len(set(outputs)) == len(outputs), dict(zip(SAMPLES, outputs))
