"""SavedModel export: named signatures over raw columns and over tf.Example, with the spec in assets/.

The model does its own preprocessing (see builder.py), so a signature only adds the head's
outputs under fixed names (never the Keras output layer's name). The dataset's
`_meta/feature_spec.json`, `stats.json` and `vocab/*.txt` travel in `assets/`, so whoever
serves the model reads the spec it was trained on from the model itself.

The chief exports on its own disk, to `<export_dir>.tmp-<random>`, and renames it into place:
an export directory is complete or absent. It is then published to the model directory,
wherever that lives, through the driver (`cluster.node.control_client.DriverLink.publish`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from typing import TYPE_CHECKING, Any, Callable

from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.dataset import MANIFEST, META, SPEC, STATS, VOCAB
from tfos_jobs.contracts.metrics import Anomaly
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.features.spec import FeatureSpec, TextFeature
from tfos_jobs.tasks import Task

if TYPE_CHECKING:
    import tensorflow as tf


def make_signatures(model: "tf.keras.Model", spec: FeatureSpec, anomaly: Anomaly | None = None) -> dict[str, Any]:
    """`serving_default` (one 1-D input per raw column) and `predict_examples` (serialized
    tf.Example, parsed in-graph with the spec's defaults for absent features); outputs as
    `contracts.serving.SIGNATURE_OUTPUTS`. A wide & deep model adds `serving_codes`."""
    import tensorflow as tf

    if spec.is_sequence:
        return _window_signatures(model, spec, anomaly)

    names = spec.model_inputs
    head = _head(spec)
    parse_spec = spec.parse_spec(names)

    # Positional arguments: the TensorSpec names become the signature's input names.
    @tf.function(input_signature=[tf.TensorSpec([None, *spec.input_shape(n)], spec.input_dtype(n), name=n) for n in names])
    def serving_default(*columns: tf.Tensor) -> dict[str, tf.Tensor]:
        return head(model(dict(zip(names, columns)), training=False))

    # Not converted by autograph: it has no control flow on tensors, and autograph once handed the spec's `get` the
    # converted code of another of its methods while a stream's model was exported (a TypeError, training lost).
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=contract.EXAMPLES_INPUT)], autograph=False)
    def predict_examples(examples: tf.Tensor) -> dict[str, tf.Tensor]:
        return head(model(spec.dense_lists(tf.io.parse_example(examples, parse_spec)), training=False))

    signatures = {contract.SERVING_SIGNATURE: serving_default.get_concrete_function(),
                  contract.EXAMPLES_SIGNATURE: predict_examples.get_concrete_function()}
    from tfos_jobs.model import wide_deep

    layers = wide_deep.of(model)
    if layers is not None and not (spec.bags or spec.vectors):  # codes stand for one value a row
        @tf.function(input_signature=[
            tf.TensorSpec([None], tf.string, name=contract.CODES_STRINGS),
            tf.TensorSpec([len(spec.categorical), None], tf.int32, name=contract.CODES_CODES),
            tf.TensorSpec([len(spec.numeric), None], tf.float32, name=contract.CODES_NUMBERS)])
        def serving_codes(strings: tf.Tensor, codes: tf.Tensor, numbers: tf.Tensor) -> dict[str, tf.Tensor]:
            return head(layers.from_codes(strings, codes, numbers))

        signatures[contract.CODES_SIGNATURE] = serving_codes.get_concrete_function()
    texts = {f.name: f.width() for f in spec.bags if isinstance(f, TextFeature)}
    if layers is not None and texts:
        @tf.function(input_signature=[tf.TensorSpec([None, texts[n]], tf.int64, name=n) if n in texts else
                                      tf.TensorSpec([None, *spec.input_shape(n)], spec.input_dtype(n), name=n)
                                      for n in names])
        def serving_ids(*columns: tf.Tensor) -> dict[str, tf.Tensor]:
            return head(layers.from_ids(dict(zip(names, columns))))

        signatures[contract.IDS_SIGNATURE] = serving_ids.get_concrete_function()
    return signatures


def _window_signatures(model: "tf.keras.Model", spec: FeatureSpec, anomaly: Anomaly | None) -> dict[str, Any]:
    """An autoencoder's signatures: `serving_default` takes each window's key (a string) and one raw [windows, steps]
    tensor per sensor, `predict_examples` serialized tf.SequenceExamples; both return the latent vector, the
    reconstruction error (weighed per sensor as `anomaly` says) and whether it is above its asset's threshold (the
    fleet's for an asset without one)."""
    import tensorflow as tf

    from tfos_jobs.data.reader import asset_strings
    from tfos_jobs.model.sequence import STANDARDIZE, scoring_model

    if anomaly is None:
        raise ValueError("an autoencoder is exported with its anomaly threshold")
    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    names, steps, key = spec.model_inputs, spec.time.window, spec.key.name
    standardize = model.get_layer(STANDARDIZE)
    fleet, by_asset = anomaly.get("sensor_scale"), anomaly.get("asset_sensor_scale") or {}
    own = anomaly.get("thresholds") or {}
    rows = None if fleet is None else [[(weights or fleet)[f.name] for f in spec.sequences]
                                       for weights in [fleet, *(by_asset.get(a) for a in standardize.assets)]]
    scorer = scoring_model(model, rows)
    # Row 0 (an asset the model never saw) and every asset without its own: the fleet's threshold.
    thresholds = tf.constant([anomaly["threshold"]] + [own.get(a, anomaly["threshold"]) for a in standardize.assets],
                             tf.float32)
    context, lists = spec.sequence_parse_spec()
    lists = {f.name: lists[f.name] for f in spec.sequences}

    def head(columns: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        out = scorer(columns, training=False)
        error = tf.cast(out[contract.RECONSTRUCTION_ERROR], tf.float32)
        return {contract.LATENT: tf.cast(out[contract.LATENT], tf.float32), contract.RECONSTRUCTION_ERROR: error,
                contract.IS_ANOMALY: error > tf.gather(thresholds, standardize.rows(columns[key]))}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=n) if n == key else
                                  tf.TensorSpec([None, steps], tf.float32, name=n) for n in names])
    def serving_default(*columns: tf.Tensor) -> dict[str, tf.Tensor]:
        return head(dict(zip(names, columns)))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=contract.EXAMPLES_INPUT)])
    def predict_examples(examples: tf.Tensor) -> dict[str, tf.Tensor]:
        ctx, parsed, _ = tf.io.parse_sequence_example(examples, context_features={key: context[key]},
                                                      sequence_features=lists)
        return head({key: asset_strings(ctx[key]), **{n: tf.ensure_shape(parsed[n], [None, steps]) for n in lists}})

    return {contract.SERVING_SIGNATURE: serving_default.get_concrete_function(),
            contract.EXAMPLES_SIGNATURE: predict_examples.get_concrete_function()}


def _head(spec: FeatureSpec) -> Callable[[Any], dict[str, Any]]:
    """Model output -> named outputs. Label strings are constants of the graph."""
    import tensorflow as tf

    label = spec.label
    if label.task == Task.BINARY:
        names = contract.class_names(spec)

        def binary(y: tf.Tensor) -> dict[str, tf.Tensor]:
            p = tf.reshape(tf.cast(y, tf.float32), [-1])
            class_id = tf.cast(p >= 0.5, tf.int64)
            return {contract.PROBABILITY: p, contract.CLASS_ID: class_id,
                    contract.LABEL: tf.gather(tf.constant(names), class_id)}

        return binary
    if label.task == Task.MULTICLASS:
        classes = contract.class_names(spec)

        def multiclass(y: tf.Tensor) -> dict[str, tf.Tensor]:
            probs = tf.cast(y, tf.float32)
            class_id = tf.argmax(probs, axis=-1, output_type=tf.int64)
            return {contract.PROBABILITIES: probs, contract.PROBABILITY: tf.reduce_max(probs, axis=-1),
                    contract.CLASS_ID: class_id, contract.LABEL: tf.gather(tf.constant(classes), class_id)}

        return multiclass

    def regression(y: tf.Tensor) -> dict[str, tf.Tensor]:
        return {contract.VALUE: tf.reshape(tf.cast(y, tf.float32), [-1])}

    return regression


def export_saved_model(model: "tf.keras.Model", meta: DatasetMeta, export_dir: str, *,
                       is_chief: bool = True, anomaly: Anomaly | None = None,
                       io_device: str | None = None) -> str | None:
    """Save the model with its signatures and the dataset's spec, stats and vocabularies.

    Every worker of a multi-worker strategy must call this (saving runs collectives); only the
    chief's copy is kept. `io_device`: the device that writes the variables (the chief's, when
    they live on parameter servers that share no disk with it). `anomaly`: an autoencoder's
    score weights and threshold (the chief's count; the others' only give the graph its shape).
    Returns the export directory
    on the chief, None elsewhere.
    """
    export_dir = export_dir.rstrip("/")
    signatures = make_signatures(model, meta.spec, anomaly)
    if not is_chief:
        scratch = tempfile.mkdtemp(prefix="tfos-export-")
        try:
            _save(model, scratch, signatures, io_device)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None

    os.makedirs(os.path.dirname(export_dir) or ".", exist_ok=True)
    tmp = f"{export_dir}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        _save(model, tmp, signatures, io_device)
        _copy_meta(meta, tmp)
        _move_into_place(tmp, export_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return export_dir


def _save(model: "tf.keras.Model", path: str, signatures: dict[str, Any], io_device: str | None) -> None:
    # No Keras layer traces (serving uses the signatures only; traces slow the save down) and
    # no optimizer state (a serving model does not train).
    import tensorflow as tf

    model.save(path, save_format="tf", signatures=signatures, include_optimizer=False, save_traces=False,
               options=tf.saved_model.SaveOptions(experimental_io_device=io_device) if io_device else None)


def _copy_meta(meta: DatasetMeta, export_dir: str) -> None:
    """The dataset's spec, stats, manifest and vocabularies into the model's assets (contracts.serving)."""
    src = f"{meta.root}/{META}"
    copies = [(f"{src}/{SPEC}", contract.spec_asset(export_dir)), (f"{src}/{STATS}", contract.stats_asset(export_dir)),
              (f"{src}/{MANIFEST}", contract.manifest_asset(export_dir))]
    copies += [(f"{src}/{VOCAB}/{f.name}.txt", contract.vocab_asset(export_dir, f.name)) for f in meta.spec.with_vocabulary]
    for source, target in copies:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source, target)


def _move_into_place(tmp: str, export_dir: str) -> None:
    """Rename tmp to export_dir; an existing export is moved aside first and deleted after."""
    old = None
    if os.path.exists(export_dir):
        old = f"{export_dir}.old-{uuid.uuid4().hex[:12]}"
        os.rename(export_dir, old)
    try:
        os.rename(tmp, export_dir)
    except Exception:
        if old:
            os.rename(old, export_dir)  # put the previous export back
        raise
    if old:
        shutil.rmtree(old)


def load_signature(export_dir: str, name: str = contract.SERVING_SIGNATURE) -> Any:
    """A signature of an exported model, as a concrete function taking tensors by keyword.

    Loaded with tf.saved_model.load: only the saved graphs run, no Python code of the model."""
    import tensorflow as tf

    signatures = tf.saved_model.load(export_dir).signatures
    if name not in signatures:
        raise KeyError(f"{export_dir} has no signature {name!r}; it has: {', '.join(signatures)}")
    return signatures[name]


def read_spec(export_dir: str) -> FeatureSpec:
    """The feature spec the model was trained on, from its assets."""
    with open(contract.spec_asset(export_dir), encoding="utf-8") as fh:
        return FeatureSpec.from_json(fh.read())
