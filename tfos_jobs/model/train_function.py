"""A training function of the user's (`train.fn`, or `api.train(fn=...)`): found and checked on the driver before any
Spark job, found again on every TF node, and called there with the node's context.

It takes the context (`fn(ctx)`), or TensorFlowOnSpark's two arguments (`main_fun(args, ctx)`: `args` then holds
`[train.model.params]` as attributes, as TFoS's `args` held the command line's), so a TFoS program's function runs here
as it is (docs/training.md, "Your own training function").
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any, Callable, Mapping

from tfos_jobs.errors import ConfigError

KEY = "train.fn"
CONTEXT, TFOS = "ctx", "args, ctx"  # how the function is called


@dataclasses.dataclass(frozen=True)
class CheckedFunction:
    """`name`: "module:function"; `by_value`: the callable the nodes get pickled (a script's or notebook's function),
    None when they import `name`; `calling`: CONTEXT or TFOS."""

    name: str
    fn: Callable[..., Any]
    by_value: Callable[..., Any] | None
    calling: str


def resolve(name: str) -> Callable[..., Any]:
    """The function `name` ("module:function") names, imported here (the current directory too, as for a model
    function)."""
    from tfos_jobs.tf_import import tensorflow
    from tfos_jobs.user_code import import_function

    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{KEY}: {name!r} is not 'module:function'")
    tensorflow(devices=False)  # the module imports TensorFlow the package's way (tf-keras, quietly)
    try:
        return import_function(name, KEY)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check(fn: "str | Callable[..., Any] | CheckedFunction") -> CheckedFunction:
    """The function, found and its arguments checked: one (the context) or two (TFoS's args and ctx)."""
    from tfos_jobs.model.builder import kind_of

    if isinstance(fn, CheckedFunction):
        return fn
    if isinstance(fn, str):
        name, by_value, found = fn, None, resolve(fn)
    elif callable(fn):
        name, by_value = kind_of(fn)
        found = fn
    else:
        raise ConfigError(f"train(): fn= must be 'module:function' or a callable, got {fn!r}")
    return CheckedFunction(name, found, by_value, calling(found, name))


def calling(fn: Callable[..., Any], name: str) -> str:
    try:
        signature = inspect.signature(fn)
    except ValueError:  # no signature to read (a builtin): called with the context
        return CONTEXT
    for style, args in ((CONTEXT, ("ctx",)), (TFOS, ("args", "ctx"))):
        try:
            signature.bind(*args)
            return style
        except TypeError:
            continue
    raise ConfigError(f"{KEY}: {name} must take the node's context (fn(ctx)), or TensorFlowOnSpark's "
                      f"(args, ctx); its signature is {signature}")


def call(fn: Callable[..., Any], ctx: Any, params: Mapping[str, Any]) -> Any:
    """`fn` on a TF node: with the context, or TFoS-style with `params` as an argparse namespace first."""
    if calling(fn, getattr(fn, "__qualname__", repr(fn))) == TFOS:
        return fn(argparse.Namespace(**params), ctx)
    return fn(ctx)
