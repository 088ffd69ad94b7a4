"""[tracking] settings, registered-model URIs and what a config becomes as MLflow params."""
from __future__ import annotations

import pytest

from tfos_jobs import config
from tfos_jobs.errors import ConfigError
from tfos_jobs.tracking.params import MASK, flatten, redact
from tfos_jobs.tracking.registry import ModelRef, is_registered

from tests.conftest import CENSUS


def test_tracking_is_off_by_default_and_register_needs_a_server():
    assert not config.load(CENSUS).tracking.enabled
    with pytest.raises(ConfigError, match="tracking.register: registering a model needs tracking.uri"):
        config.load(CENSUS, ["tracking.register=census"])
    with pytest.raises(ConfigError, match="tracking.alias: an alias is set on a registered version"):
        config.load(CENSUS, ["tracking.uri=http://127.0.0.1:5000", "tracking.alias=champion"])
    with pytest.raises(ConfigError, match="tracking.alias: 'latest' is reserved"):
        config.load(CENSUS, ["tracking.uri=http://127.0.0.1:5000", "tracking.register=census", "tracking.alias=latest"])
    cfg = config.load(CENSUS, ["tracking.uri=http://127.0.0.1:5000", "tracking.register=census",
                               "tracking.alias=champion"])
    assert (cfg.tracking.register, cfg.tracking.alias) == ("census", "champion")


def test_credentials_in_the_tracking_uri_are_refused():
    with pytest.raises(ConfigError, match="tracking.uri: credentials are never written in the config"):
        config.load(CENSUS, ["tracking.uri=https://me:secret@mlflow.example.com"])


@pytest.mark.parametrize("uri, ref", [
    ("models:/census@champion", ModelRef("census", alias="champion")),
    ("models:/census/3", ModelRef("census", version="3")),
    ("models:/census/latest", ModelRef("census", version="latest")),
])
def test_registered_model_uris(uri, ref):
    assert is_registered(uri) and ModelRef.parse(uri, "predict.model") == ref


@pytest.mark.parametrize("uri", ["models:/census", "models:/census/x", "models:/a/b/c", "models:/@x"])
def test_a_malformed_registered_model_uri_names_the_setting(uri):
    with pytest.raises(ConfigError, match=r"predict.model: .* is not a registered model URI; write models:/NAME@alias"):
        ModelRef.parse(uri, "predict.model")


def test_params_are_flat_and_keep_no_password():
    tree = {"train": {"learning_rate": 0.01, "model": {"kind": "wide_deep", "hidden": [64, 32]}},
            "sources": {"db": {"options": {"url": "jdbc:postgresql://app:s3cret@db:5432/x?password=s3cret&ssl=true",
                                           "token": "abc"}, "password_env": "DB_PASSWORD"}},
            "spark": {"conf": {}}}
    params = flatten(tree)
    assert params["train.learning_rate"] == "0.01"
    assert params["train.model.kind"] == "wide_deep"
    assert params["train.model.hidden"] == "[64, 32]"
    assert params["spark.conf"] == "{}"
    assert params["sources.db.options.token"] == MASK
    assert params["sources.db.password_env"] == "DB_PASSWORD"  # the variable's name, not its value
    assert "s3cret" not in "".join(params.values())
    assert params["sources.db.options.url"] == f"jdbc:postgresql://app:{MASK}@db:5432/x?password={MASK}&ssl=true"
    assert redact("http://host:5000") == "http://host:5000"


def test_a_runs_metrics_say_what_its_relaunches_cost():
    from tfos_jobs.tracking.model_log import summary_metrics

    recovery = {"attempt": 2, "failed_at_steps": 430, "resumed_at_steps": 400, "trained_again": 30,
                "seconds_without_steps": 9.5, "resumed_time": 1e9, "nodes_kept": ["chief-0"],
                "nodes_restarted": ["worker-0"], "cause": "failure", "workers": 2}
    base = {"eval": {"auc": 0.9}, "seconds": 12.0, "epochs": 3, "attempts": 3}
    out = summary_metrics({**base, "recoveries": [recovery, {**recovery, "attempt": 3, "trained_again": 12}]})
    assert out["steps_trained_again"] == 42 and out["seconds_without_steps"] == 19.0 and out["eval_auc"] == 0.9
    assert out["nodes_restarted"] == 2 and "resizes" not in out
    elastic = summary_metrics({**base, "recoveries": [{**recovery, "cause": "shrink", "workers": 1},
                                                       {**recovery, "attempt": 4, "cause": "grow", "workers": 2}]})
    assert (elastic["resizes"], elastic["min_workers_trained"]) == (2, 1)
    assert "steps_trained_again" not in summary_metrics({**base, "attempts": 1, "recoveries": []})
