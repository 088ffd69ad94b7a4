"""Which columns MLflow's python_function of a tfos model reads: by name, or by position when
`mlflow.pyfunc.spark_udf` passes the inputs as columns (it names them "0", "1", ...)."""
from __future__ import annotations

import pandas as pd
import pytest

from tfos_jobs.tracking.pyfunc_model import model_columns

INPUTS = ("age", "education", "hours_per_week")


def test_named_columns_are_taken_by_name_in_the_models_order_and_the_rest_ignored():
    frame = pd.DataFrame({"hours_per_week": [40.0], "label": [">50K"], "age": [39.0], "education": ["Bachelors"]})
    got = model_columns(frame, INPUTS)
    assert list(got.columns) == list(INPUTS)
    assert got.iloc[0].tolist() == [39.0, "Bachelors", 40.0]


def test_positional_columns_are_the_models_inputs_in_order():
    frame = pd.DataFrame({"0": [39.0, 50.0], "1": ["Bachelors", "HS-grad"], "2": [40.0, 13.0]})
    got = model_columns(frame, INPUTS)
    assert list(got.columns) == list(INPUTS)
    assert got["education"].tolist() == ["Bachelors", "HS-grad"] and got["hours_per_week"].tolist() == [40.0, 13.0]


@pytest.mark.parametrize("columns", [["0", "1"], ["age", "education"], ["1", "0", "2"]])
def test_too_few_or_unknown_columns_name_what_is_missing_and_what_was_given(columns):
    frame = pd.DataFrame({c: [1.0] for c in columns})
    with pytest.raises(ValueError) as e:
        model_columns(frame, INPUTS)
    message = str(e.value)
    assert f"(it has columns {columns})" in message
    assert "the model takes ['age', 'education', 'hours_per_week'], by name or as 3 columns in that order" in message
    assert "lacks feature(s) [" in message and "'hours_per_week'" in message
