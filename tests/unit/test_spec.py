import json

import pytest

from tfos_jobs import config
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import (BucketizedFeature, CategoricalFeature, CrossedFeature, FeatureSpec,
                                     KeyFeature, Label, NumericFeature)

from tests.conftest import CENSUS


def small_spec(**label) -> FeatureSpec:
    return FeatureSpec((
        KeyFeature("id"),
        NumericFeature("age", default=30.0),
        NumericFeature("hours", normalize=False, default="mean"),
        CategoricalFeature("job", top_k=10, min_count=2, num_oov_buckets=2, embedding_dim=4),
        BucketizedFeature("age_b", source="age", boundaries=(20.0, 40.0)),
        CrossedFeature("job_x_age", columns=("job", "age_b"), hash_buckets=50),
        Label("y", **(label or {"positive": (">50K",), "negative": ("<=50K",)})),
    )).check()


def test_json_round_trip_keeps_every_field():
    spec = small_spec()
    again = FeatureSpec.from_json(spec.to_json())
    assert again == spec
    assert again.fingerprint() == spec.fingerprint()
    assert again.get("job").num_oov_buckets == 2
    assert again.get("job_x_age").columns == ("job", "age_b")


def test_census_config_round_trips_through_json():
    spec = config.load(CENSUS).features
    assert FeatureSpec.from_json(spec.to_json()) == spec


def test_fingerprint_changes_with_meaning():
    a = small_spec()
    b = a.with_feature(CategoricalFeature("job", top_k=11, min_count=2, num_oov_buckets=2, embedding_dim=4))
    assert a.fingerprint() != b.fingerprint()


def test_views_follow_spec_order():
    spec = small_spec()
    assert spec.model_inputs == ("age", "hours", "job")
    assert spec.stored_columns == ("id", "age", "hours", "job", "y")
    assert spec.key.name == "id" and spec.label.name == "y"


def test_record_dtypes_and_schema():
    spec = small_spec()
    assert spec.record_dtypes() == {"id": "int64", "age": "float32", "hours": "float32", "job": "string", "y": "int64"}
    regression = small_spec(task="regression")
    assert regression.record_dtypes()["y"] == "float32"
    schema = spec.record_schema()
    assert schema["age"] == {"dtype": "float32", "shape": [], "default": 30.0}
    assert schema["hours"]["default"] is None  # "mean" is resolved at prepare time
    assert json.loads(spec.to_json())["records"] == schema


def test_parse_spec_types():
    import tensorflow as tf

    parse = small_spec().parse_spec()
    assert list(parse) == ["id", "age", "hours", "job", "y"]
    assert parse["id"].dtype == tf.int64
    assert parse["age"].dtype == tf.float32 and parse["age"].default_value == 30.0
    assert parse["job"].dtype == tf.string
    assert parse["y"].dtype == tf.int64


def test_input_type_errors_name_the_column():
    spec = small_spec()
    ok = {"id": "long", "age": "integer", "hours": "double", "job": "string", "y": "string"}
    assert spec.input_type_errors(ok) == []
    errs = dict(spec.input_type_errors({**ok, "age": "string", "job": "array"} | {"id": "long"}))
    assert "has type string" in errs["age"] and "double" in errs["age"]
    assert "job" in errs
    missing = {k: v for k, v in ok.items() if k != "hours"}
    assert spec.input_type_errors(missing) == [("hours", "column 'hours' (numeric feature) is missing")]


@pytest.mark.parametrize("features, message", [
    ((NumericFeature("a"), NumericFeature("a"), Label("y", task="regression")), "features.a: defined more than once"),
    ((NumericFeature("a"),), "exactly one feature needs kind = \"label\""),
    ((NumericFeature("a"), CrossedFeature("c", ("a", "b")), Label("y", task="regression")), "'a' is not a categorical"),
    ((NumericFeature("a"), BucketizedFeature("b", "a", (3.0, 1.0)), Label("y", task="regression")), "strictly increasing"),
    ((NumericFeature("a"), Label("y", positive=("1",))), "needs both positive and negative"),
    ((NumericFeature("bad name"), Label("y", task="regression")), "features.bad name: a feature name"),
    ((CategoricalFeature("c", top_k=0), Label("y", task="regression")), "features.c.top_k: must be >= 1"),
    ((CategoricalFeature("c", hash_buckets=0), Label("y", task="regression")), "features.c.hash_buckets: must be >= 1"),
    ((CategoricalFeature("c", hash_buckets=8, top_k=3), Label("y", task="regression")),
     "features.c.top_k: a hashed feature (hash_buckets) has no vocabulary"),
])
def test_invalid_specs_are_rejected_with_the_key(features, message):
    with pytest.raises(ConfigError) as err:
        FeatureSpec(features).check()
    assert message in str(err.value)


def test_hashed_ids_come_from_the_config_and_leave_other_specs_as_they_were():
    """hash_buckets is written only where it is set: a spec without it hashes (fingerprint) as it did before."""
    census = config.load(CENSUS).features
    assert all("hash_buckets" not in f for f in census.to_dict()["features"] if f["kind"] == "categorical")
    hashed = config.load(CENSUS, ["features.occupation.hash_buckets=1000"]).features
    assert hashed.get("occupation").hash_buckets == 1000 and hashed.get("occupation").hashed
    assert [f.name for f in hashed.categorical if f not in hashed.with_vocabulary] == ["occupation"]
    assert FeatureSpec.from_json(hashed.to_json()) == hashed
    assert hashed.fingerprint() != census.fingerprint()
    assert config.load(CENSUS, ["features.occupation.hash_buckets=1000"]).features.fingerprint() == hashed.fingerprint()


def test_from_json_rejects_unknown_version():
    data = small_spec().to_dict() | {"format_version": 99}
    with pytest.raises(ConfigError, match="format_version 99"):
        FeatureSpec.from_dict(data)
