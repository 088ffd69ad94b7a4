"""The Keras model built from the spec and its SavedModel export. TensorFlow only, no Spark.

One small binary model is trained once (module fixture) on rows whose label depends on a
numeric and a categorical feature, and exported once; the tests read that export.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from tfos_jobs.config import ModelConfig
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.features.spec import (BucketizedFeature, CategoricalFeature, CrossedFeature, FeatureSpec,
                                     KeyFeature, Label, NumericFeature)
from tfos_jobs.model import builder
from tfos_jobs.model.builder import build_model, compile_model, resolve_build
from tfos_jobs.model.export import export_saved_model, load_signature, read_spec

SMALL = ModelConfig(first_layer_size=16, num_layers=2, scale_factor=0.5)
VOCAB = {"color": ["red", "green", "blue"]}
STATS = {"x": {"count": 400, "mean": 2.0, "std": 3.0, "min": -7.0, "max": 11.0},
         "flat": {"count": 400, "mean": 5.0, "std": 0.0, "min": 5.0, "max": 5.0},
         "raw": {"count": 400, "mean": 1.0, "std": 1.0, "min": 0.0, "max": 2.0}}
MANIFEST = {"splits": {"train": {"records": 400}, "eval": {"records": 100}}}


def make_spec(label: Label) -> FeatureSpec:
    return FeatureSpec((
        KeyFeature("id"),
        NumericFeature("x", default=0.0),
        CategoricalFeature("color", num_oov_buckets=2, embedding_dim=3, default="__missing__"),
        NumericFeature("flat", default=5.0),                      # std 0: only centred
        NumericFeature("raw", normalize=False, default=1.0),
        BucketizedFeature("x_b", source="x", boundaries=(-1.0, 2.0, 5.0)),
        CrossedFeature("color_x_xb", columns=("color", "x_b"), hash_buckets=20),
        label,
    )).check()


BINARY = make_spec(Label("y", positive=("yes",), negative=("no",)))


def make_rows(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Raw model inputs; the binary label is 1 when x is high, shifted up by red and down by blue."""
    rng = np.random.default_rng(seed)
    x = rng.normal(2.0, 3.0, n).astype(np.float32)
    color = rng.choice(np.array(VOCAB["color"], dtype=object), n)
    score = (x - 2.0) / 3.0 + 1.5 * (color == "red") - 1.5 * (color == "blue")
    return {"x": x, "color": color, "flat": np.full(n, 5.0, np.float32),
            "raw": rng.uniform(0, 2, n).astype(np.float32), "y": (score > 0).astype(np.int64)}


def features(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in rows.items() if k != "y"}


def write_meta(root: Path, spec: FeatureSpec) -> DatasetMeta:
    """A dataset `_meta/` directory as prepare writes it (no records needed for export)."""
    (root / "_meta" / "vocab").mkdir(parents=True)
    (root / "_meta" / "feature_spec.json").write_text(spec.to_json())
    (root / "_meta" / "stats.json").write_text(json.dumps(STATS))
    (root / "_meta" / "manifest.json").write_text(json.dumps(MANIFEST))
    for name, values in VOCAB.items():
        (root / "_meta" / "vocab" / f"{name}.txt").write_text("\n".join(values) + "\n")
    return DatasetMeta(str(root), spec, STATS, MANIFEST, VOCAB)


def to_examples(rows: dict[str, np.ndarray]) -> np.ndarray:
    """Serialized tf.Example, one per row, with the columns given (only)."""
    out = []
    for i in range(len(next(iter(rows.values())))):
        feats = {}
        for name, col in rows.items():
            v = col[i]
            if isinstance(v, str):
                feats[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
            elif isinstance(v, np.integer):
                feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))
            else:
                feats[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
        out.append(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return np.array(out, dtype=object)


def tiny_user_model(spec, vocab, stats, model_cfg):
    """A user model function ("module:function"): same inputs, different architecture."""
    inputs = {n: tf.keras.Input(shape=(), dtype=spec.input_dtype(n), name=n) for n in spec.model_inputs}
    parts = []
    for f in spec.numeric:
        parts.append(tf.keras.layers.Reshape((1,))(inputs[f.name]))
    for f in spec.categorical:
        ids = tf.keras.layers.StringLookup(vocabulary=vocab[f.name], mask_token=None)(inputs[f.name])
        parts.append(tf.keras.layers.Embedding(len(vocab[f.name]) + 1, 2)(ids))
    out = tf.keras.layers.Dense(1, activation="sigmoid", name="user_out")(tf.keras.layers.Concatenate()(parts))
    return tf.keras.Model(inputs, out, name="user_model")


NOT_CALLABLE = 42


@pytest.fixture(scope="module")
def rows() -> dict[str, np.ndarray]:
    return make_rows(600)


@pytest.fixture(scope="module")
def trained(rows):
    tf.keras.utils.set_random_seed(1)
    model = compile_model(build_model(BINARY, VOCAB, STATS, SMALL), BINARY, "adam", 0.05)
    history = model.fit(features(rows), rows["y"], batch_size=64, epochs=4, verbose=0)
    return model, history


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> tuple[Path, DatasetMeta]:
    root = tmp_path_factory.mktemp("binary")
    meta = write_meta(root / "dataset", BINARY)
    out = export_saved_model(trained[0], meta, str(root / "models" / "export"))
    assert out == str(root / "models" / "export")
    return Path(out), meta


# -- the model ---------------------------------------------------------------------------------


def test_inputs_are_the_spec_model_inputs_with_their_dtypes():
    model = build_model(BINARY, VOCAB, STATS, ModelConfig())
    # model.input keeps the spec's order; model.inputs (the flat list) is sorted by name in tf-keras
    assert list(model.input) == ["x", "color", "flat", "raw"] == list(BINARY.model_inputs)
    assert {n: (i.dtype, tuple(i.shape)) for n, i in model.input.items()} == {
        "x": (tf.float32, (None,)), "color": (tf.string, (None,)),
        "flat": (tf.float32, (None,)), "raw": (tf.float32, (None,))}
    hidden = [layer.units for layer in model.layers if layer.name.startswith("hidden_")]
    assert hidden == [100, 70, 49, 34]
    assert [l.units for l in build_model(BINARY, VOCAB, STATS, SMALL).layers if l.name.startswith("hidden_")] == [16, 8]
    assert model.output_names == ["probability"] and tuple(model.output.shape) == (None, 1)
    # wide part: one weight per id, all features in one table; ids = OOV buckets + vocabulary,
    # buckets + 1, hash buckets
    wide = model.get_layer("wide")
    assert (wide.sizes, wide.offsets, wide.dim, wide.combiner) == ([5, 4, 20], [0, 5, 9], 1, "sum")
    assert tuple(wide.embeddings.shape) == (29, 1)
    # deep part: the categoricals' embeddings, one table per embedding width
    embed = model.get_layer("embed_3")
    assert (embed.sizes, tuple(embed.embeddings.shape)) == ([5], (5, 3))
    assert len(model.trainable_variables) == 2 + 2 * (4 + 1)  # two tables, 4 hidden layers + logits


def test_shared_embedding_equals_one_table_per_feature():
    from tfos_jobs.model.layers import SharedEmbedding

    a_ids, b_ids = tf.constant([0, 2, 1], tf.int64), tf.constant([3, 0, 3], tf.int64)
    table = np.arange(7 * 2, dtype=np.float32).reshape(7, 2)  # a: rows 0-2, b: rows 3-6
    for combiner, expected in (("concat", np.concatenate([table[[0, 2, 1]], table[[6, 3, 6]]], axis=1)),
                               ("sum", table[[0, 2, 1]] + table[[6, 3, 6]])):
        layer = SharedEmbedding([3, 4], 2, combiner=combiner)
        layer([a_ids, b_ids])
        layer.embeddings.assign(table)
        np.testing.assert_array_equal(layer([a_ids, b_ids]).numpy(), expected)
    # the gradient reaches exactly the rows looked up, each feature in its own block
    layer = SharedEmbedding([3, 4], 2, combiner="sum")
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(layer([a_ids, b_ids]))
    grad = tf.convert_to_tensor(tape.gradient(out, layer.embeddings)).numpy()
    assert grad[:, 0].tolist() == [1, 1, 1, 1, 0, 0, 2]
    assert SharedEmbedding.from_config(layer.get_config()).get_config() == layer.get_config()
    with pytest.raises(ValueError, match="combiner"):
        SharedEmbedding([3], 2, combiner="mean")


def test_preprocessing_is_in_the_graph():
    model = build_model(BINARY, VOCAB, STATS, SMALL)
    probe = tf.keras.Model(model.inputs, [model.get_layer(n).output for n in
                                          ("norm_x", "norm_flat", "lookup_color", "bucketize_x_b")])
    x = np.array([2.0, 5.0, -1.0], np.float32)
    norm_x, norm_flat, color_ids, buckets = probe.predict(
        {"x": x, "color": np.array(["red", "blue", "purple"], object),
         "flat": np.array([5.0, 6.0, 4.0], np.float32), "raw": x}, verbose=0)
    np.testing.assert_allclose(norm_x, [0.0, 1.0, -1.0], atol=1e-6)
    np.testing.assert_allclose(norm_flat, [0.0, 1.0, -1.0], atol=1e-6)  # std 0 -> divided by 1
    assert color_ids[:2].tolist() == [2, 4] and color_ids[2] in (0, 1)  # 2 OOV ids come first
    assert buckets.tolist() == [2, 3, 1]  # boundaries (-1, 2, 5): a value on a boundary goes up


def test_training_learns_a_label_that_depends_on_a_numeric_and_a_categorical(trained, rows):
    model, history = trained
    assert set(history.history) == {"loss", "auc", "accuracy"}
    assert history.history["loss"][-1] < history.history["loss"][0]
    result = model.evaluate(features(rows), rows["y"], batch_size=256, verbose=0, return_dict=True)
    assert result["auc"] > 0.9
    assert result["accuracy"] > 0.8
    # both features are used: at the mean of x the colour decides, at a fixed colour x does
    p = model.predict({"x": np.array([2.0, 2.0, -4.0, 8.0], np.float32),
                       "color": np.array(["red", "blue", "green", "green"], object),
                       "flat": np.full(4, 5.0, np.float32), "raw": np.ones(4, np.float32)}, verbose=0)[:, 0]
    assert p[0] > 0.8 and p[1] < 0.2 and p[2] < 0.2 and p[3] > 0.8


def test_compile_metrics_and_optimizers_by_name():
    for name, cls in [("adam", "Adam"), ("adagrad", "Adagrad"), ("sgd", "SGD"), ("rmsprop", "RMSprop"),
                      ("ftrl", "Ftrl")]:
        opt = builder.make_optimizer(name, 0.125)
        assert type(opt).__name__ == cls and float(opt.learning_rate) == 0.125
    with pytest.raises(ValueError, match="train.optimizer"):
        builder.make_optimizer("lion", 0.1)


# -- export ------------------------------------------------------------------------------------


def test_serving_default_equals_model_predict(trained, exported, rows):
    model, _ = trained
    serve = load_signature(str(exported[0]))
    out = serve(**{k: tf.constant(v) for k, v in features(rows).items() if k in BINARY.model_inputs})
    expected = model.predict(features(rows), batch_size=128, verbose=0)[:, 0]
    np.testing.assert_allclose(out["probability"].numpy(), expected, atol=1e-6)
    assert out["class_id"].numpy().tolist() == (expected >= 0.5).astype(int).tolist()
    assert out["label"].numpy().tolist() == [b"yes" if p >= 0.5 else b"no" for p in expected]


def test_predict_examples_equals_model_predict(trained, exported, rows):
    model, _ = trained
    ids = {"id": np.arange(len(rows["x"]), dtype=np.int64)}
    examples = to_examples({**ids, **rows})  # key and label are in the records too, and ignored
    out = load_signature(str(exported[0]), "predict_examples")(examples=tf.constant(examples))
    expected = model.predict(features(rows), batch_size=128, verbose=0)[:, 0]
    np.testing.assert_allclose(out["probability"].numpy(), expected, atol=1e-6)
    assert out["label"].numpy().tolist() == [b"yes" if p >= 0.5 else b"no" for p in expected]


def test_unseen_category_and_missing_features_still_predict(exported):
    serve = load_signature(str(exported[0]))
    examples = load_signature(str(exported[0]), "predict_examples")
    one = {"x": [7.0], "color": ["purple"], "flat": [5.0], "raw": [1.5]}
    p = serve(**{k: tf.constant(v) for k, v in one.items()})["probability"].numpy()
    assert p.shape == (1,) and 0.0 < p[0] < 1.0
    # x and color absent from the record: parsed as their spec defaults 0.0 and "__missing__" (OOV)
    missing = to_examples({"flat": np.array([5.0], np.float32), "raw": np.array([1.5], np.float32)})
    got = examples(examples=tf.constant(missing))["probability"].numpy()
    defaults = serve(x=tf.constant([0.0]), color=tf.constant(["__missing__"]), flat=tf.constant([5.0]),
                     raw=tf.constant([1.5]))["probability"].numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, defaults, atol=1e-6)


def codes_of(rows: dict[str, np.ndarray], spec: FeatureSpec) -> dict[str, tf.Tensor]:
    """The batch as `serving_codes` takes it: the distinct values of every categorical column
    (one list, shuffled), a code per row into it, the numeric columns stacked."""
    strings, codes = [], []
    for f in spec.categorical:
        values, index = np.unique(rows[f.name].astype(str), return_inverse=True)
        codes.append(index + len(strings))
        strings.extend(values.tolist())
    order = np.random.default_rng(5).permutation(len(strings))  # any order of the distinct values
    position = np.argsort(order)
    return {"strings": tf.constant(np.array(strings, object)[order]),
            "codes": tf.constant(position[np.stack(codes)].astype(np.int32)),
            "numbers": tf.constant(np.stack([rows[f.name] for f in spec.numeric]).astype(np.float32))}


def test_serving_codes_equals_serving_default_bit_for_bit(exported, rows, monkeypatch):
    from tfos_jobs.model import wide_deep

    batch = {**features(rows)}
    batch["color"] = batch["color"].copy()
    batch["color"][::7] = "purple"  # unseen: an OOV bucket, crossed with the buckets of x too
    serve = load_signature(str(exported[0]))
    expected = serve(**{k: tf.constant(v) for k, v in batch.items() if k in BINARY.model_inputs})
    got = load_signature(str(exported[0]), "serving_codes")(**codes_of(batch, BINARY))
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name].numpy(), expected[name].numpy())
    # crosses of more combinations than fit in an int64 are hashed row by row: the same ids
    layers = wide_deep.of(build_model(BINARY, VOCAB, STATS, SMALL))
    ids = [tf.constant([4, 2, 4, 0], tf.int64), tf.constant([1, 3, 1, 1], tf.int64)]
    cross = BINARY.get("color_x_xb")
    by_row = layers._cross_rows(cross, ids).numpy()
    assert layers._cross_distinct(cross, ids).numpy().tolist() == by_row.tolist()
    monkeypatch.setattr(wide_deep, "_COMBINATIONS", 4)
    assert layers._cross_distinct(cross, ids).numpy().tolist() == by_row.tolist()


def test_a_user_model_has_no_codes_signature(tmp_path):
    model = tiny_user_model(BINARY, VOCAB, STATS, SMALL)
    export_saved_model(model, write_meta(tmp_path / "dataset", BINARY), str(tmp_path / "export"))
    signatures = tf.saved_model.load(str(tmp_path / "export")).signatures
    assert sorted(signatures) == ["predict_examples", "serving_default"]


def test_signatures_and_assets_follow_the_spec(exported):
    path, _ = exported
    serve = load_signature(str(path))
    inputs = serve.structured_input_signature[1]
    assert {n: s.dtype for n, s in inputs.items()} == {
        "x": tf.float32, "color": tf.string, "flat": tf.float32, "raw": tf.float32}
    assert all(s.shape.as_list() == [None] for s in inputs.values())
    assert serve.structured_outputs.keys() == {"probability", "class_id", "label"}
    assert {k: v.dtype for k, v in serve.structured_outputs.items()} == {
        "probability": tf.float32, "class_id": tf.int64, "label": tf.string}
    examples = load_signature(str(path), "predict_examples")
    assert list(examples.structured_input_signature[1]) == ["examples"]
    assert examples.structured_outputs.keys() == {"probability", "class_id", "label"}
    assert read_spec(str(path)) == BINARY
    assert json.loads((path / "assets" / "stats.json").read_text()) == STATS
    assert json.loads((path / "assets" / "manifest.json").read_text()) == MANIFEST
    assert (path / "assets" / "vocab" / "color.txt").read_text().splitlines() == VOCAB["color"]
    assert not list(path.parent.glob("export.tmp-*")) and not list(path.parent.glob("export.old-*"))
    with pytest.raises(KeyError, match="serving_default, predict_examples|predict_examples, serving_default"):
        load_signature(str(path), "nope")


def test_existing_export_is_replaced_and_non_chief_leaves_nothing(trained, exported, tmp_path, monkeypatch):
    model, _ = trained
    meta = exported[1]
    target = tmp_path / "export"
    target.mkdir()
    (target / "stale.txt").write_text("old model")
    assert export_saved_model(model, meta, str(target)) == str(target)
    assert not (target / "stale.txt").exists() and (target / "saved_model.pb").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert export_saved_model(model, meta, str(tmp_path / "worker_export"), is_chief=False) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "scratch"]
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_multiclass_and_regression_heads(task, tmp_path, rows):
    label = Label("y", task="multiclass", classes=("low", "mid", "high")) if task == "multiclass" \
        else Label("y", task="regression")
    spec = make_spec(label)
    model = compile_model(build_model(spec, VOCAB, STATS, SMALL), spec, "sgd", 0.01)
    target = rows["y"] + (rows["x"] > 4) if task == "multiclass" else rows["x"] * 2.0
    history = model.fit(features(rows), target, batch_size=200, epochs=1, verbose=0)
    assert set(history.history) == ({"loss", "accuracy"} if task == "multiclass" else {"loss", "rmse"})

    path = export_saved_model(model, write_meta(tmp_path / "dataset", spec), str(tmp_path / "export"))
    out = load_signature(path)(**{k: tf.constant(v[:10]) for k, v in features(rows).items() if k != "id"})
    expected = model.predict({k: v[:10] for k, v in features(rows).items()}, verbose=0)
    if task == "multiclass":
        assert model.output_names == ["probabilities"]
        assert out.keys() == {"probabilities", "probability", "class_id", "label"}
        assert out["probabilities"].shape == (10, 3)
        np.testing.assert_allclose(out["probabilities"].numpy(), expected, atol=1e-6)
        np.testing.assert_allclose(out["probability"].numpy(), expected.max(axis=1), atol=1e-6)
        assert out["class_id"].numpy().tolist() == expected.argmax(axis=1).tolist()
        assert out["label"].numpy().tolist() == [("low", "mid", "high")[i].encode() for i in expected.argmax(axis=1)]
    else:
        assert model.output_names == ["value"]
        assert out.keys() == {"value"} and out["value"].dtype == tf.float32
        np.testing.assert_allclose(out["value"].numpy(), expected[:, 0], atol=1e-5)
    assert load_signature(path, "predict_examples").structured_outputs.keys() == out.keys()


def test_multiclass_needs_its_classes():
    with pytest.raises(ValueError, match=r"features\.y\.classes"):
        build_model(make_spec(Label("y", task="multiclass")), VOCAB, STATS, SMALL)


def test_user_model_function_by_module_path(rows):
    fn = resolve_build("tests.unit.test_model:tiny_user_model")
    assert fn is tiny_user_model
    assert resolve_build("wide_deep") is build_model
    model = compile_model(fn(BINARY, VOCAB, STATS, SMALL), BINARY, "adam", 0.01)
    assert model.name == "user_model" and list(model.input) == list(BINARY.model_inputs)
    assert model.predict(features(rows), verbose=0).shape == (600, 1)
    for bad in ("nope:missing", "tests.unit.test_model:missing", "tests.unit.test_model:NOT_CALLABLE", "dnn"):
        with pytest.raises(ValueError, match=r"train\.model\.kind"):
            resolve_build(bad)


def test_saved_model_cli_shows_the_export(exported):
    cli = Path(sys.executable).parent / "saved_model_cli"
    done = subprocess.run([str(cli), "show", "--all", "--dir", str(exported[0])], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "signature_def['predict_examples']" in done.stdout
    assert "signature_def['serving_default']" in done.stdout
    assert "inputs['examples']" in done.stdout and "outputs['probability']" in done.stdout
