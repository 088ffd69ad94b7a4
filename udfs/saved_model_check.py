"""A SavedModel checked against the feature spec it carries, once, on the driver, before any query:
what is wrong with it fails here, naming the model, instead of in every task of a query."""
from __future__ import annotations

import os

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
    serving = signatures[contract.SERVING_SIGNATURE]
    inputs = sorted(serving.structured_input_signature[1])
    if inputs != sorted(spec.model_inputs):
        raise ConfigError(f"the SavedModel's inputs {inputs} do not match its feature spec {list(spec.model_inputs)}")
    task = contract.task_of(spec)
    outputs, expected = sorted(serving.structured_outputs), sorted(contract.SIGNATURE_OUTPUTS[task])
    if outputs != expected:
        raise ConfigError(f"the SavedModel's outputs {outputs} are not those of a {task} model ({expected})")
