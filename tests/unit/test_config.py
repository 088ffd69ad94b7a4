import pytest

from tfos_jobs import config
from tfos_jobs.errors import ConfigError

from tests.conftest import CENSUS


def test_census_config_loads_into_frozen_dataclasses():
    cfg = config.load(CENSUS)
    assert cfg.prepare.main == "people"
    assert cfg.prepare.lookups[0].right_on == "country"
    assert cfg.prepare.activity.as_of == "2026-01-01"
    assert cfg.features.label.positive == (">50K",)
    with pytest.raises(AttributeError):
        cfg.prepare.output = "x"


def test_overrides_are_typed_by_toml_rules():
    cfg = config.load(CENSUS, [
        "prepare.split.eval_fraction=0.25", "synthetic.people=500", "prepare.output=/tmp/x",
        "features.native_country.top_k=10", "spark.conf.spark.sql.shuffle.partitions=3",
    ])
    assert cfg.prepare.split.eval_fraction == 0.25
    assert cfg.synthetic.people == 500
    assert cfg.prepare.output == "/tmp/x"
    assert cfg.features.get("native_country").top_k == 10
    assert cfg.spark.conf["spark.sql.shuffle.partitions"] == "3"


def test_unknown_key_names_key_and_allowed_keys():
    with pytest.raises(ConfigError) as err:
        config.load(CENSUS, ["prepare.split.fraction=0.3"])
    msg = str(err.value)
    assert "prepare.split.fraction: unknown key" in msg
    assert "eval_fraction" in msg and "mode" in msg


def test_bad_choice_lists_allowed_values():
    with pytest.raises(ConfigError) as err:
        config.load(CENSUS, ["prepare.compression=snappy"])
    assert "prepare.compression: 'snappy' is not one of: none, gzip" in str(err.value)


def test_bad_feature_kind_lists_kinds():
    with pytest.raises(ConfigError) as err:
        config.load(CENSUS, ["features.age.kind=numerc"])
    assert "features.age.kind: 'numerc' is not one of: key, numeric, categorical" in str(err.value)


def test_wrong_value_type_names_key():
    with pytest.raises(ConfigError, match=r"synthetic.people: expected an integer, got 'many'"):
        config.load(CENSUS, ["synthetic.people=many"])
    with pytest.raises(ConfigError, match=r"features.age.default: 'median' does not fit"):
        config.load(CENSUS, ["features.age.default=median"])


@pytest.mark.parametrize("override, message", [
    ("prepare.split.eval_fraction=1.5", "prepare.split.eval_fraction: must be between 0 and 1"),
    ("prepare.main=peple", "prepare.main: 'peple' is not a source; sources: people, regions, events"),
    ("prepare.activity.as_of=yesterday", "prepare.activity.as_of: 'yesterday' is not an ISO date"),
    ("prepare.files_per_split=0", "prepare.files_per_split: must be >= 1"),
    ("prepare.split.mode=column", "prepare.split.column: required"),
    ("train.steps_per_execution=0", "train.steps_per_execution: must be >= 1, got 0"),
    ("train.dense_gradient_limit=-1", "train.dense_gradient_limit: must be >= 0, got -1"),
    ("train.in_memory_mb=-5", "train.in_memory_mb: must be >= 0, got -5"),
    ("train.threads=-1", "train.threads: must be >= 0, got -1"),
    ("train.profile_steps=-2", "train.profile_steps: must be >= 0, got -2"),
    ("train.gradient_exchange=ring", "train.gradient_exchange: 'ring' is not one of: auto, mesh, all_gather, all_reduce"),
    ('train.tf_ports="39100"', "train.tf_ports: '39100' holds 1 port(s), fewer than the TF cluster's 2 nodes"),
    ("train.tf_ports=39100-39102", "train.tf_ports: '39100-39102' holds 3 port(s), fewer than the TF cluster's 2 "
     "nodes need; each node takes two of its own (its TF server and its gradient mesh)"),
    ("train.tf_ports=39100-39050", "train.tf_ports: '39100-39050' is not a port or a range of ports within 1-65535"),
    ("sources.people.format=csv", None),
])
def test_cross_field_validation(override, message):
    if message is None:  # a valid override
        assert config.load(CENSUS, [override]).sources["people"].format == "csv"
        return
    with pytest.raises(ConfigError) as err:
        config.load(CENSUS, [override])
    assert message in str(err.value)


def test_training_speed_settings_default_and_override():
    tr = config.load(CENSUS).train
    assert (tr.steps_per_execution, tr.dense_gradient_limit, tr.in_memory_mb, tr.threads, tr.profile_steps,
            tr.gradient_exchange) == (20, 262_144, 1024, 0, 0, "auto")
    tr = config.load(CENSUS, ["train.steps_per_execution=50", "train.threads=4", "train.in_memory_mb=0",
                              "train.gradient_exchange=all_reduce"]).train
    assert (tr.steps_per_execution, tr.threads, tr.in_memory_mb, tr.gradient_exchange) == (50, 4, 0, "all_reduce")


def test_malformed_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="expected key=value"):
        config.load(CENSUS, ["prepare.output"])
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[prepare\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(bad)


def test_missing_required_key(tmp_path):
    text = CENSUS.read_text().replace('main = "people"\n', "")
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="prepare.main: required key is missing"):
        config.load(path)


def test_eval_from_train_needs_a_split_column_and_a_key():
    with pytest.raises(ConfigError, match=r"prepare.split.eval_from_train: applies to mode = \"column\" only"):
        config.load(CENSUS, ["prepare.split.eval_from_train=true"])
    adult = config.load(CENSUS.parent / "adult.toml")
    assert adult.prepare.split.eval_from_train and adult.prepare.split.column == "source_split"
    assert {f.name: f.encoding for f in adult.features.numeric} == dict.fromkeys(
        ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"), "periodic")


def test_model_params_are_a_free_read_only_table_for_a_user_model():
    cfg = config.load(CENSUS, ["train.model.kind=mymodels:build", "train.model.params.cross_layers=3",
                               "train.model.params.deep_units=[64, 32]", 'train.model.params.norm="batch"',
                               "train.model.params.residual=true"])
    params = cfg.train.model.params
    assert params == {"cross_layers": 3, "deep_units": (64, 32), "norm": "batch", "residual": True}
    with pytest.raises(TypeError, match="train.model.params is read-only"):
        params["cross_layers"] = 4
    # as the TOML table it was: in the resolved config (metrics.json, MLflow params) and through pickling
    import json

    assert json.loads(json.dumps(config.to_dict(cfg)))["train"]["model"]["params"] == {
        "cross_layers": 3, "deep_units": [64, 32], "norm": "batch", "residual": True}
    import pickle

    assert pickle.loads(pickle.dumps(cfg.train.model)) == cfg.train.model
    assert hash(cfg.train.model) == hash(pickle.loads(pickle.dumps(cfg.train.model)))
    from tfos_jobs.tracking.params import flatten

    flat = flatten(config.to_dict(cfg))
    assert flat["train.model.params.cross_layers"] == "3" and flat["train.model.params.deep_units"] == "[64, 32]"


def test_model_params_refused_where_they_would_be_ignored_or_cannot_be_values():
    with pytest.raises(ConfigError, match=r"train\.model\.params: cross_layers: the built-in model 'wide_deep' takes no"):
        config.load(CENSUS, ["train.model.params.cross_layers=3"])
    with pytest.raises(ConfigError, match=r"train\.model\.params\.layer: expected a string, number or boolean"):
        config.load(CENSUS, ["train.model.kind=m:build", "train.model.params.layer={units = 3}"])
    # a setting of one's own outside params is still an unknown key, with where it belongs
    with pytest.raises(ConfigError, match=r"train\.model\.cross_layers: unknown key; .*go under train\.model\.params"):
        config.load(CENSUS, ["train.model.kind=m:build", "train.model.cross_layers=3"])
    with pytest.raises(ConfigError, match=r"train\.batch: unknown key"):
        config.load(CENSUS, ["train.batch=3"])


def test_tf_ports_need_a_second_port_per_node_only_for_the_gradient_mesh():
    gathered = config.load(CENSUS, ["train.tf_ports=39100-39101", "train.gradient_exchange=all_gather"]).train
    assert (gathered.tf_ports, gathered.workers) == ("39100-39101", 2)
    assert config.load(CENSUS, ["train.tf_ports=39100-39103"]).train.gradient_exchange == "auto"


def test_census_aggregates_load_as_sql_expressions_and_last_values():
    [agg] = config.load(CENSUS).prepare.aggregates
    assert (agg.source, agg.key, agg.where) == ("events", "person_id", "ts < TIMESTAMP'2026-01-01 00:00:00'")
    assert agg.columns["recent_pages"] == config.LastValues(last="page", order_by="ts", n=10)
    assert agg.columns["queries"].startswith("concat_ws(' ', ")


def aggregate_errors(entries: list[dict]) -> str:
    """The ConfigError of census with `entries` as its aggregates."""
    raw = config.read_config_file(CENSUS)
    raw["prepare"]["aggregates"] = entries
    with pytest.raises(ConfigError) as err:
        config.from_dict(raw)
    return str(err.value)


@pytest.mark.parametrize("entries, message", [
    ([{"source": "clicks", "key": "person_id", "columns": {"n": "count(1)"}}],
     "prepare.aggregates[0].source: 'clicks' is not a source; sources: people, regions, events"),
    ([{"source": "events", "key": "person_id", "columns": {}}], "prepare.aggregates[0].columns: give at least one"),
    ([{"source": "events", "key": "person_id", "columns": {"n": " "}}], "prepare.aggregates[0].columns.n: an empty"),
    ([{"source": "events", "key": "person_id", "columns": {"pages": {"last": "page", "order_by": "ts", "n": 0}}}],
     "prepare.aggregates[0].columns.pages.n: must be >= 1, got 0"),
    ([{"source": "events", "key": "person_id", "columns": {"pages": {"last": "page"}}}],
     "prepare.aggregates[0].columns.pages: {'last': 'page'} does not fit"),
    ([{"source": "events", "key": "person_id", "columns": {"n": "count(1)"}},
      {"source": "regions", "key": "country", "columns": {"n": "count(1)"}}],
     "prepare.aggregates[1].columns.n: also a column of prepare.aggregates[0]; give it another name"),
    ([{"source": "events", "key": "person_id", "columns": {"n": "count(1)"}},
      {"source": "events", "key": "person_id", "columns": {"m": "count(1)"}, "where": "page = '/home'"}],
     "prepare.aggregates[1].source: 'events' has an entry already (prepare.aggregates[0]): one entry, one groupBy per "
     "source; a column of other rows takes `FILTER (WHERE ...)`"),
    ([{"source": "events", "key": "person_id", "columns": {"person_id": "max(person_id)"}}],
     "prepare.aggregates[0].columns.person_id: also a column of the main table's key"),
    ([{"source": "events", "key": "person_id", "column": {"n": "count(1)"}}],
     "prepare.aggregates[0].column: unknown key; allowed keys: source, key, columns, where"),
])
def test_aggregates_are_checked_before_spark_starts(entries, message):
    assert message in aggregate_errors(entries)


def test_aggregates_need_a_key_feature_to_join_on():
    raw = config.read_config_file(CENSUS)
    raw["prepare"]["aggregates"] = [{"source": "events", "key": "person_id", "columns": {"n": "count(1)"}}]
    raw["prepare"]["split"] = {"mode": "column", "column": "part"}
    raw["prepare"].pop("activity")
    raw["features"]["person_id"] = {"kind": "numeric"}
    with pytest.raises(ConfigError, match="prepare.aggregates: joining aggregates needs a feature with kind = \"key\""):
        config.from_dict(raw)
