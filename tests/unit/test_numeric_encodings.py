"""Numeric encodings (piecewise-linear over quantile bins, periodic): the layers' values, the
spec settings, and a model using them exported and served as any other."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfos_jobs.config import ModelConfig
from tfos_jobs.config.loading import build_spec
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import CategoricalFeature, FeatureSpec, KeyFeature, Label, NumericFeature
from tfos_jobs.model.builder import build_model, compile_model
from tfos_jobs.model.export import export_saved_model, load_signature
from tfos_jobs.model.layers import PeriodicEmbeddings, PiecewiseLinearEmbeddings

SMALL = ModelConfig(first_layer_size=16, num_layers=2, scale_factor=0.5)
VOCAB = {"color": ["red", "green", "blue"]}
EDGES = [-4.0, 0.0, 1.0, 2.0, 3.0, 8.0]
STATS = {"x": {"count": 600, "mean": 2.0, "std": 3.0, "min": -7.0, "max": 11.0, "bins": EDGES},
         "z": {"count": 600, "mean": 0.0, "std": 1.0, "min": -3.0, "max": 3.0},
         "w": {"count": 600, "mean": 1.0, "std": 1.0, "min": 0.0, "max": 2.0}}
SPEC = FeatureSpec((
    KeyFeature("id"),
    NumericFeature("x", default=0.0, encoding="piecewise_linear", bins=5, embedding_dim=4),
    NumericFeature("z", default=0.0, encoding="periodic", frequencies=8, sigma=1.0, embedding_dim=4),
    NumericFeature("w", default=1.0),
    CategoricalFeature("color", embedding_dim=3),
    Label("y", positive=("yes",), negative=("no",)),
)).check()


def test_piecewise_linear_encoding_values():
    layer = PiecewiseLinearEmbeddings([[0.0, 1.0, 3.0, 7.0], [10.0, 20.0]], dim=2)
    x = tf.constant([[-1.0, 5.0], [0.5, 10.0], [2.0, 25.0], [9.0, 15.0]])
    got = layer.encode(x).numpy()
    # feature 0: three bins, the first open below, the last open above; feature 1: one bin, open both ways
    np.testing.assert_allclose(got[:, 0], [[-1.0, 0.0, 0.0], [0.5, 0.0, 0.0], [1.0, 0.5, 0.0], [1.0, 1.0, 1.5]])
    np.testing.assert_allclose(got[:, 1], [[-0.5, 0, 0], [0.0, 0, 0], [1.5, 0, 0], [0.5, 0, 0]])
    assert layer(x).shape == (4, 4)
    with pytest.raises(ValueError, match="strictly increasing"):
        PiecewiseLinearEmbeddings([[1.0, 1.0]], dim=2)


def test_periodic_embeddings_are_a_relu_layer_over_cos_and_sin():
    tf.keras.utils.set_random_seed(3)
    layer = PeriodicEmbeddings(features=2, frequencies=3, sigma=0.5, dim=4)
    x = tf.constant([[0.3, -1.2], [2.0, 0.0]])
    got = layer(x).numpy()
    c, k, b = layer.coefficients.numpy(), layer.kernel.numpy(), layer.bias.numpy()
    for i in range(2):
        angles = 2 * math.pi * c[i] * x.numpy()[:, i:i + 1]
        periodic = np.concatenate([np.cos(angles), np.sin(angles)], axis=1)
        np.testing.assert_allclose(got[:, 4 * i:4 * i + 4], np.maximum(periodic @ k[i] + b[i], 0), rtol=1e-5, atol=1e-6)
    wide = PeriodicEmbeddings(features=4, frequencies=256, sigma=0.5, dim=2)
    wide.build((None, 4))
    assert 0.45 < np.std(wide.coefficients.numpy()) < 0.55  # started at N(0, sigma)


def test_encoding_settings_are_checked_and_kept_out_of_linear_specs():
    base = {"id": {"kind": "key"}, "y": {"kind": "label", "positive": ["1"], "negative": ["0"]}}
    for setting, value, message in (("encoding", "spline", "encoding"), ("bins", 1, "bins: must be >= 2"),
                                    ("sigma", 0.0, "sigma: must be > 0"), ("embedding_dim", 0, "embedding_dim")):
        with pytest.raises(ConfigError, match=f"features.a.{message}"):
            build_spec({**base, "a": {"kind": "numeric", setting: value}})
    linear = build_spec({**base, "a": {"kind": "numeric"}})
    assert "sigma" not in linear.to_json() and "encoding" not in linear.to_json()
    periodic = json.loads(build_spec({**base, "a": {"kind": "numeric", "encoding": "periodic"}}).to_json())
    entry = next(f for f in periodic["features"] if f["name"] == "a")
    assert (entry["encoding"], entry["frequencies"], entry["sigma"], entry["embedding_dim"]) == ("periodic", 64, 10.0, 16)
    assert "bins" not in entry
    assert FeatureSpec.from_json(build_spec({**base, "a": {"kind": "numeric", "encoding": "periodic"}}).to_json()
                                 ).get("a").encoding == "periodic"


def rows(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """y is 1 inside a band of x (a function a plain ReLU net draws poorly from x alone)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(2.0, 3.0, n).astype(np.float32)
    return {"x": x, "z": rng.normal(0, 1, n).astype(np.float32), "w": rng.uniform(0, 2, n).astype(np.float32),
            "color": rng.choice(np.array(VOCAB["color"], dtype=object), n),
            "y": ((x > 1.0) & (x < 3.0)).astype(np.int64)}


def test_a_model_with_encoded_numerics_learns_exports_and_serves_the_same(tmp_path: Path):
    data = rows(1200)
    inputs = {k: v for k, v in data.items() if k != "y"}
    tf.keras.utils.set_random_seed(1)
    model = compile_model(build_model(SPEC, VOCAB, STATS, SMALL), SPEC, "adam", 0.02)
    history = model.fit(inputs, data["y"], batch_size=64, epochs=15, verbose=0)
    assert history.history["accuracy"][-1] > 0.95  # the band's two edges are bin edges

    root = tmp_path / "dataset"
    (root / "_meta" / "vocab").mkdir(parents=True)
    (root / "_meta" / "feature_spec.json").write_text(SPEC.to_json())
    (root / "_meta" / "stats.json").write_text(json.dumps(STATS))
    (root / "_meta" / "manifest.json").write_text(json.dumps({"splits": {}}))
    (root / "_meta" / "vocab" / "color.txt").write_text("\n".join(VOCAB["color"]) + "\n")
    export = export_saved_model(model, DatasetMeta(str(root), SPEC, STATS, {}, VOCAB), str(tmp_path / "export"))
    expected = model.predict(inputs, verbose=0).ravel()
    served = load_signature(export)(**{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(served["probability"].numpy(), expected, atol=1e-6)
    values, codes = np.unique(inputs["color"].astype(str), return_inverse=True)
    by_codes = load_signature(export, "serving_codes")(
        strings=tf.constant(values.astype(object)), codes=tf.constant(codes[np.newaxis].astype(np.int32)),
        numbers=tf.constant(np.stack([inputs[f.name] for f in SPEC.numeric]).astype(np.float32)))
    for name in served:
        np.testing.assert_array_equal(by_codes[name].numpy(), served[name].numpy())


def test_piecewise_linear_without_bins_names_the_feature():
    stats = {**STATS, "x": {k: v for k, v in STATS["x"].items() if k != "bins"}}
    with pytest.raises(ValueError, match="features.x: encoding = \"piecewise_linear\" needs the bins"):
        build_model(SPEC, VOCAB, stats, SMALL)
