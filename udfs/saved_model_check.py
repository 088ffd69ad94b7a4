"""A SavedModel checked against the feature spec it carries, once, on the driver, before any query:
what is wrong with it fails here, naming the model, instead of in every task of a query."""
from __future__ import annotations

import os
from typing import Any

from tfos_jobs.contracts import serving as contract
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.tf_import import tensorflow


def check_saved_model(spec: FeatureSpec, local_dir: str, export_dir: str) -> None:
    """`local_dir`, the driver's copy of `export_dir` (which errors name), has `spec`'s vocabularies
    in its assets, loads, and has the signatures, inputs and outputs of a model of `spec`."""
    missing = [f.name for f in spec.with_vocabulary if not os.path.isfile(contract.vocab_asset(local_dir, f.name))]
    if missing:
        where = os.path.dirname(os.path.relpath(contract.vocab_asset(local_dir, missing[0]), local_dir))
        raise ConfigError(f"{export_dir!r} lacks vocabularies for {missing} in {where}/")
    tf = tensorflow()
    try:
        signatures = tf.saved_model.load(local_dir).signatures
    except Exception as e:  # TF raises several types for unreadable models
        raise ConfigError(f"cannot load the SavedModel in {export_dir!r}: {str(e).splitlines()[0]}") from None
    absent = [s for s in contract.SIGNATURES if s not in signatures]
    if absent:
        raise ConfigError(f"the SavedModel in {export_dir!r} lacks signature(s) {absent}; it has {list(signatures)}")
    refuse_python_bodies(signatures, (contract.SERVING_SIGNATURE, contract.CODES_SIGNATURE, contract.IDS_SIGNATURE),
                         f"the SavedModel in {export_dir!r}")
    serving = signatures[contract.SERVING_SIGNATURE]
    inputs = sorted(serving.structured_input_signature[1])
    if inputs != sorted(spec.model_inputs):
        raise ConfigError(f"the SavedModel's inputs {inputs} do not match its feature spec {list(spec.model_inputs)}")
    task = contract.task_of(spec)
    outputs, expected = sorted(serving.structured_outputs), sorted(contract.SIGNATURE_OUTPUTS[task])
    if outputs != expected:
        raise ConfigError(f"the SavedModel's outputs {outputs} are not those of a {task} model ({expected})")


# The ops of tf.py_function and tf.numpy_function: a SavedModel keeps only a key into the registry of the Python process
# that traced it, so they run nowhere else (TensorFlow: "Could not find callback with key=pyfunc_0 in the registry").
PYTHON_BODIED_OPS = ("EagerPyFunc", "PyFunc", "PyFuncStateless")


def python_bodied_ops(function: Any) -> list[str]:
    """The ops of PYTHON_BODIED_OPS that `function` (a loaded signature) or a function it calls holds."""
    graph = function.graph.as_graph_def()
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    return sorted({n.op for n in nodes if n.op in PYTHON_BODIED_OPS})


def refuse_python_bodies(signatures: Any, names: tuple[str, ...], where: str) -> None:
    """A ConfigError, before any query, for a scored signature no engine can run: neither a Python worker (not the
    process that saved the model) nor the executor JVM has the Python function's body; every task would fail."""
    for name in names:
        ops = python_bodied_ops(signatures[name]) if name in signatures else []
        if ops:
            raise ConfigError(f"{where}: its {name} signature calls a Python function (op {', '.join(ops)}, from "
                              "tf.py_function or tf.numpy_function) whose body a SavedModel does not keep: it runs only "
                              "in the process that saved the model, not in a Python worker nor in the executor JVM; "
                              "write it with TensorFlow ops and export the model again")
