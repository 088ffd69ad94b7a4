"""A training function is found and its arguments checked on the driver, before any Spark job; on a node it is called
with the context, or TensorFlowOnSpark-style with the params as `args`."""
from __future__ import annotations

import argparse

import pytest

from tfos_jobs.config import ModelConfig, TrainConfig
from tfos_jobs.config.loading import build
from tfos_jobs.contracts.node_args import Launch, NodeArgs
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.model import train_function


def with_context(ctx):
    return ("ctx", ctx)


def tfos_style(args, ctx):
    return ("tfos", args, ctx)


def too_many(a, b, c):
    return None


def test_functions_are_checked_by_their_arguments_and_called_their_way():
    assert train_function.check(with_context).calling == train_function.CONTEXT
    assert train_function.check(tfos_style).calling == train_function.TFOS
    with pytest.raises(ConfigError, match=r"train.fn: .*too_many must take the node's context .*\(a, b, c\)"):
        train_function.check(too_many)
    assert train_function.call(with_context, "C", {"units": 8}) == ("ctx", "C")
    kind, args, ctx = train_function.call(tfos_style, "C", {"units": 8, "epochs": 3})
    assert kind == "tfos" and ctx == "C" and args == argparse.Namespace(units=8, epochs=3)


def test_a_function_by_name_is_imported_and_a_wrong_name_is_refused():
    checked = train_function.check("tests.unit.test_train_function:tfos_style")
    assert checked.fn is tfos_style and checked.by_value is None and checked.calling == train_function.TFOS
    with pytest.raises(ConfigError, match="train.fn: cannot import module 'nonexistent_mod' of 'nonexistent_mod:fit'"):
        train_function.check("nonexistent_mod:fit")
    with pytest.raises(ConfigError, match="has no callable 'fitt'"):
        train_function.check("tests.unit.test_train_function:fitt")
    with pytest.raises(ConfigError, match="is not 'module:function'"):
        train_function.check("fit")


def test_train_fn_settings_are_checked_and_it_takes_the_params():
    spec = FeatureSpec.from_dict({"format_version": 1, "features": [{"name": "x", "kind": "numeric"},
                                               {"name": "y", "kind": "label", "task": "regression"}]})
    params = ModelConfig(params={"units": 8})
    assert any("train.fn: 'fit' is not 'module:function'" in e for e in TrainConfig(fn="fit").errors(spec))
    assert any("takes no params" in e for e in TrainConfig(model=params).errors(spec))
    assert TrainConfig(fn="mine:fit", model=params).errors(spec) == []  # a training function takes the params


def test_a_pickled_training_function_crosses_to_the_node_in_the_launch():
    args = NodeArgs.from_train_config(TrainConfig(fn="__main__:with_context"), dataset="d", train_fn=with_context)
    assert args.own_training and args.train_fn is not None
    launch = Launch(run_id="r", strategy="local", nodes=1, num_ps=0, server=("h", 1), relayed=False, tf_ports=[0],
                    local_dir="", inputs=[], args=args)
    back = Launch.from_json(launch.to_json())
    assert back.args == args
    assert not NodeArgs.from_train_config(TrainConfig(), dataset="d").own_training
    assert build(NodeArgs, args.to_dict(), "node args") == args
