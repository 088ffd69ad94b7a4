"""The sensor autoencoder's served score: each sensor's squared error weighed by the inverse of
its mean over the train windows. TensorFlow only, no Spark.

One small autoencoder is trained on windows of two sensors: `quiet` (a sine the model learns)
and `noisy` (noise it cannot learn). The same fault added to either sensor moves the unweighted
error alike; weighed, the quiet sensor's fault scores far above the noisy one's, which is what
a reader of real server metrics needs (a sensor noisy in normal times no longer drowns a fault
on a quiet one)."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from tfos_jobs.config import from_dict
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.metrics import Anomaly
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.model.builder import compile_model
from tfos_jobs.model.export import export_saved_model, load_signature
from tfos_jobs.features.standardisation import STATS_PER_ASSET, per_asset, two_valued_span
from tfos_jobs.model.layers import WindowScore
from tfos_jobs.model.sequence import STANDARDIZE, build_autoencoder, error_quantiles, scoring_model, sensor_scale

STEPS, WINDOWS = 16, 256
SENSORS = ("quiet", "noisy")
CONFIG = from_dict({
    "features": {"asset_id": {"kind": "key", "dtype": "string"},
                 "ts": {"kind": "time", "window": STEPS, "stride": STEPS},
                 **{s: {"kind": "sequence"} for s in SENSORS}},
    "sources": {"s": {"format": "parquet", "path": "/data"}},
    "prepare": {"main": "s", "output": "/out"},
    "train": {"model": {"kind": "sequence_autoencoder", "units": 16, "latent_dim": 8, "anomaly_quantile": 0.9}}})
SPEC = CONFIG.features


def normal_windows(seed: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1))
    quiet = np.sin(phase + np.linspace(0, np.pi, STEPS)) + rng.normal(0, 0.02, (n, STEPS))
    return {"quiet": quiet.astype(np.float32), "noisy": rng.normal(0, 1, (n, STEPS)).astype(np.float32)}


def keyed(windows: dict[str, np.ndarray], asset: str = "a") -> dict[str, np.ndarray]:
    """The model's inputs: the windows and their asset."""
    return {**windows, "asset_id": np.array([asset] * len(windows["quiet"]))}


def write_windows(path: Path, windows: dict[str, np.ndarray], assets: list[str] | None = None) -> str:
    with tf.io.TFRecordWriter(str(path)) as out:
        for i in range(len(windows["quiet"])):
            example = tf.train.SequenceExample()
            example.context.feature["asset_id"].bytes_list.value.append((assets[i] if assets else "a").encode())
            example.context.feature["window_start"].int64_list.value.append(i * STEPS)
            example.context.feature["window_end"].int64_list.value.append(i * STEPS + STEPS - 1)
            for sensor in SENSORS:
                steps = example.feature_lists.feature_list[sensor]
                for v in windows[sensor][i]:
                    steps.feature.add().float_list.value.append(float(v))
            out.write(example.SerializeToString())
    return str(path)


def stats(windows: dict[str, np.ndarray]) -> dict:
    return {s: {"count": int(v.size), "mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()),
                "max": float(v.max())} for s, v in windows.items()}


SPEC_STD = {s: v["std"] for s, v in stats(normal_windows(1, WINDOWS)).items()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("sequence")
    tf.keras.utils.set_random_seed(7)
    train = normal_windows(1, WINDOWS)
    files = [write_windows(root / "train.tfrecord", train)]
    manifest = {"splits": {"train": {"records": WINDOWS}}}
    (root / "_meta" / "vocab").mkdir(parents=True)
    (root / "_meta" / "feature_spec.json").write_text(SPEC.to_json())
    (root / "_meta" / "stats.json").write_text(json.dumps(stats(train)))
    (root / "_meta" / "manifest.json").write_text(json.dumps(manifest))
    meta = DatasetMeta(str(root), SPEC, stats(train), manifest, {})
    model = compile_model(build_autoencoder(SPEC, {}, meta.stats, CONFIG.train.model), SPEC, "adam", 0.01)
    model.fit(keyed(train), np.zeros(WINDOWS), batch_size=32, epochs=25, verbose=0)
    return model, files, meta, root


def test_each_sensor_is_weighed_by_the_inverse_of_its_mean_train_error(trained):
    model, files, _, _ = trained
    rows = sensor_scale(model, files, SPEC, "none", by_asset=True)
    assert len(rows) == 1  # a dataset without per-asset statistics: the fleet's row alone
    scale = dict(zip(SENSORS, rows[0]))
    # the sine is learnt, the noise is not: its normal error is far larger, its weight far smaller
    assert scale["quiet"] > 5 * scale["noisy"], scale
    # and the weights are exactly the inverse mean squared errors of the train windows
    parts = tf.keras.Model(model.inputs, model.get_layer(contract.RECONSTRUCTION_ERROR).input)
    train = normal_windows(1, WINDOWS)
    reconstruction, target = (t.numpy() for t in parts(keyed(train)))
    expected = 1.0 / ((reconstruction - target) ** 2).mean(axis=(0, 1))
    np.testing.assert_allclose([scale[s] for s in SENSORS], expected, rtol=1e-3)


def test_a_fault_on_a_quiet_sensor_outscores_the_same_fault_on_a_noisy_one_once_weighed(trained):
    model, files, _, _ = trained
    scale = sensor_scale(model, files, SPEC, "none", by_asset=False)
    windows = normal_windows(2, 64)
    faults = {}
    for sensor in SENSORS:
        hit = {s: v.copy() for s, v in windows.items()}
        hit[sensor][:, STEPS // 2:] += 1.5 * SPEC_STD[sensor]  # the same shift in each sensor's own std
        faults[sensor] = hit
    plain, weighed = scoring_model(model), scoring_model(model, scale)
    score = {(name, sensor): float(np.median(m(keyed(faults[sensor]))[contract.RECONSTRUCTION_ERROR].numpy()))
             for name, m in (("plain", plain), ("weighed", weighed)) for sensor in SENSORS}
    assert score["weighed", "quiet"] > 3 * score["weighed", "noisy"], score
    assert score["plain", "quiet"] < 2 * score["plain", "noisy"], score  # unweighed, the noise hides it


def test_the_export_serves_the_weighed_error_and_flags_it_above_the_train_quantile(trained):
    model, files, meta, root = trained
    scale = sensor_scale(model, files, SPEC, "none", by_asset=True)
    scorer = scoring_model(model, scale)
    threshold, own = error_quantiles(scorer, files, SPEC, "none", 0.9)
    assert own == {"a": pytest.approx(threshold)}  # one asset: its quantile is the fleet's
    anomaly = Anomaly(quantile=0.9, threshold=threshold, thresholds=own, sensor_scale=dict(zip(SENSORS, scale[0])),
                      asset_sensor_scale={})
    export = export_saved_model(model, meta, str(root / "export"), anomaly=anomaly)
    windows = normal_windows(3, 40)
    windows["quiet"][:5] += 3.0
    served = load_signature(export)(**{s: tf.constant(v) for s, v in keyed(windows).items()})
    error = served[contract.RECONSTRUCTION_ERROR].numpy()
    np.testing.assert_allclose(error, scorer(keyed(windows))[contract.RECONSTRUCTION_ERROR].numpy(), rtol=1e-4)
    assert served[contract.IS_ANOMALY].numpy().tolist() == (error > threshold).tolist()
    assert served[contract.IS_ANOMALY].numpy()[:5].all() and served[contract.IS_ANOMALY].numpy()[5:].mean() < 0.5
    # the train windows' own served errors: about 10 % above the threshold
    train = normal_windows(1, WINDOWS)
    flagged = float((scorer(keyed(train))[contract.RECONSTRUCTION_ERROR].numpy() > threshold).mean())
    assert 0.05 <= flagged <= 0.15, flagged
    assert json.loads(json.dumps(anomaly))["sensor_scale"]["quiet"] == pytest.approx(scale[0][0])



TWO_ASSETS = {**{s: {"count": 8, "mean": 5.0, "std": 5.0, "min": 0.0, "max": 12.0} for s in SENSORS},
              "asset_id": {"count": 2, STATS_PER_ASSET: {"a": {"count": [4, 4], "mean": [0.0, 0.0], "std": [1.0, 1.0]},
                                                          "b": {"count": [4, 4], "mean": [10.0, 5.0], "std": [2.0, 0.0]}}}}


def test_each_asset_is_standardised_by_its_own_train_statistics_and_an_unseen_one_by_the_fleets():
    assets, means, variances = per_asset(SPEC, TWO_ASSETS)
    assert assets == ("a", "b")
    # a's std (1) is below a quarter of the fleet's (5): floored at 1.25; b's noisy sensor, constant in training, too
    assert means == [[0.0, 0.0], [10.0, 5.0], [5.0, 5.0]]
    assert variances == [[1.5625, 1.5625], [4.0, 1.5625], [25.0, 25.0]]
    model = build_autoencoder(SPEC, {}, TWO_ASSETS, CONFIG.train.model)
    layer = model.get_layer("standardize")
    window = np.full((3, STEPS, 2), 11.0, np.float32)
    out = layer([tf.constant(window), tf.constant(["a", "b", "never-seen"])]).numpy()
    np.testing.assert_allclose(out[:, 0, :], [[11 / 1.25, 11 / 1.25], [0.5, 6 / 1.25], [6 / 5, 6 / 5]], rtol=1e-6)
    # far beyond anything in training: clipped at train.model.clip standard deviations, in either direction
    CLIP = CONFIG.train.model.clip
    assert CLIP == 10.0
    window[:, :, 0], window[:, :, 1] = -1999.0, 30.0
    out = layer([tf.constant(window), tf.constant(["a", "b", "never-seen"])]).numpy()
    np.testing.assert_allclose(out[:, 0, :], [[-CLIP, CLIP], [-CLIP, CLIP], [-CLIP, 25 / 5]], rtol=1e-6)
    unclipped = build_autoencoder(SPEC, {}, TWO_ASSETS, dataclasses.replace(CONFIG.train.model, clip=0.0))
    out = unclipped.get_layer("standardize")([tf.constant(window), tf.constant(["a", "b", "never-seen"])]).numpy()
    np.testing.assert_allclose(out[:, 0, :], [[-1999 / 1.25, 30 / 1.25], [-2009 / 2, 25 / 1.25], [-2004 / 5, 5]],
                               rtol=1e-6)
    fleet = build_autoencoder(SPEC, {}, TWO_ASSETS, dataclasses.replace(CONFIG.train.model, standardize="fleet"))
    window[:] = 12.0
    out = fleet.get_layer("standardize")([tf.constant(window), tf.constant(["a", "b", "never-seen"])]).numpy()
    np.testing.assert_allclose(out[:, 0, :], [[7 / 5, 7 / 5]] * 3, rtol=1e-6)


def test_the_export_flags_each_window_above_its_own_assets_threshold_and_an_unseen_asset_above_the_fleets(tmp_path):
    (tmp_path / "_meta" / "vocab").mkdir(parents=True)
    (tmp_path / "_meta" / "feature_spec.json").write_text(SPEC.to_json())
    (tmp_path / "_meta" / "stats.json").write_text(json.dumps(TWO_ASSETS))
    (tmp_path / "_meta" / "manifest.json").write_text(json.dumps({"splits": {"train": {"records": 8}}}))
    meta = DatasetMeta(str(tmp_path), SPEC, TWO_ASSETS, {"splits": {"train": {"records": 8}}}, {})
    tf.keras.utils.set_random_seed(3)
    model = compile_model(build_autoencoder(SPEC, {}, TWO_ASSETS, CONFIG.train.model), SPEC, "adam", 0.01)
    windows = normal_windows(4, 30)
    assets = np.array(["a"] * 10 + ["b"] * 10 + ["z"] * 10)
    error = scoring_model(model)({**windows, "asset_id": assets})[contract.RECONSTRUCTION_ERROR].numpy()
    low, mid, high = np.quantile(error, [0.2, 0.5, 0.8]).tolist()
    anomaly = Anomaly(quantile=0.9, threshold=mid, thresholds={"a": low, "b": high}, sensor_scale=None,
                      asset_sensor_scale=None)
    export = export_saved_model(model, meta, str(tmp_path / "export"), anomaly=anomaly)
    served = load_signature(export)(**{s: tf.constant(v) for s, v in {**windows, "asset_id": assets}.items()})
    np.testing.assert_allclose(served[contract.RECONSTRUCTION_ERROR].numpy(), error, rtol=1e-5)
    expected = error > np.select([assets == "a", assets == "b"], [low, high], mid)
    assert served[contract.IS_ANOMALY].numpy().tolist() == expected.tolist()
    assert expected[:10].sum() != (error[:10] > mid).sum() or expected[10:20].sum() != (error[10:20] > mid).sum()


def test_an_assets_threshold_needs_enough_of_its_own_train_windows(tmp_path):
    tf.keras.utils.set_random_seed(5)
    model = compile_model(build_autoencoder(SPEC, {}, TWO_ASSETS, CONFIG.train.model), SPEC, "adam", 0.01)
    windows = normal_windows(6, 120)
    assets = ["a"] * 100 + ["b"] * 20  # 0.99 takes 100 windows: b has too few, and takes the fleet's
    files = [write_windows(tmp_path / "train.tfrecord", windows, assets)]
    scorer = scoring_model(model)
    threshold, own = error_quantiles(scorer, files, SPEC, "none", 0.99)
    error = scorer({**windows, "asset_id": np.array(assets)})[contract.RECONSTRUCTION_ERROR].numpy()
    assert threshold == pytest.approx(float(np.quantile(error, 0.99)), rel=1e-5)
    assert list(own) == ["a"] and own["a"] == pytest.approx(float(np.quantile(error[:100], 0.99)), rel=1e-5)


def test_an_assets_weight_is_its_own_where_its_error_is_larger_and_the_fleets_otherwise(tmp_path):
    tf.keras.utils.set_random_seed(5)
    model = build_autoencoder(SPEC, {}, TWO_ASSETS, CONFIG.train.model)
    calm, rough, stranger = normal_windows(6, 40), normal_windows(7, 40), normal_windows(8, 20)
    rough["noisy"] *= 6.0  # b's noisy sensor is far noisier than a's
    windows = {s: np.concatenate([calm[s], rough[s], stranger[s]]) for s in SENSORS}
    assets = ["a"] * 40 + ["b"] * 40 + ["z"] * 20  # z: unknown to the standardisation, in the fleet's row only
    files = [write_windows(tmp_path / "train.tfrecord", windows, assets)]
    rows = sensor_scale(model, files, SPEC, "none", by_asset=True)
    parts = tf.keras.Model(model.inputs, model.get_layer(contract.RECONSTRUCTION_ERROR).input)
    reconstruction, target = (t.numpy().astype(np.float64)
                              for t in parts({**windows, "asset_id": np.array(assets)}))
    squared = (reconstruction - target) ** 2
    fleet = 1 / squared.mean(axis=(0, 1))
    own = {a: 1 / squared[np.array(assets) == a].mean(axis=(0, 1)) for a in ("a", "b")}
    np.testing.assert_allclose(rows[0], fleet, rtol=1e-6)
    np.testing.assert_allclose(rows[1], np.minimum(own["a"], fleet), rtol=1e-6)
    np.testing.assert_allclose(rows[2], np.minimum(own["b"], fleet), rtol=1e-6)
    assert rows[2][1] < 0.5 * fleet[1]  # b's noisy sensor counts less on b
    assert rows[1][1] == pytest.approx(fleet[1])  # and never more on a, where it is quieter than the fleet's
    # per_sensor: every asset takes the fleet's row
    assert sensor_scale(model, files, SPEC, "none", by_asset=False) == [rows[0]] * 3


def test_the_score_weighs_by_the_assets_row_and_grows_with_the_log_of_what_lies_past_the_clip():
    mean, variance = [[0.0, 0.0], [0.0, 0.0], [5.0, 0.0]], [[1.0, 1.0], [1.0, 1.0], [1.0, 4.0]]
    score = WindowScore(mean, variance, [[1.0, 1.0], [2.0, 1.0], [1.0, 3.0]], clip=10.0)
    reconstruction = np.zeros((3, 2, 2), np.float32)
    window = np.array([[[1, 0], [0, 0]], [[30, 0], [0, 0]], [[5, -620], [5, 0]]], np.float32)
    standardised = np.array([[[1, 0], [0, 0]], [[30, 0], [0, 0]], [[0, -310], [0, 0]]], np.float32)
    target = np.clip(standardised, -10, 10)
    out = score([reconstruction, target, window, np.array([0, 1, 2])]).numpy()
    # row 0 (the fleet's, an unseen asset): weights 1; row 1: its sensor 0 weighs 2; row 2: its sensor 1 weighs 3
    expected = [1 / 4, 2 * (100 + 20 * np.log1p(20)) / 4, 3 * (100 + 20 * np.log1p(300)) / 4]
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    assert out[2] > out[1] > out[0]
    # without a clip, nothing is added: the plain weighed mean
    plain = WindowScore(mean, variance, None, clip=None)([reconstruction, standardised, window, np.array([0, 1, 2])])
    np.testing.assert_allclose(plain.numpy(), [1 / 4, 900 / 4, 310 ** 2 / 4], rtol=1e-5)
    with pytest.raises(ValueError, match="3 rows of means need as many rows of sensor weights, got 1"):
        WindowScore(mean, variance, [[1.0, 1.0]], clip=10.0)


def test_a_two_valued_flag_is_scaled_by_half_its_span_on_every_asset():
    p = 0.01  # a 0/1 command flag on 1 % of the readings, and a sensor of the same min, max and mean that is not one
    flag = {"count": 100, "mean": p, "std": (p * (1 - p)) ** 0.5, "min": 0.0, "max": 1.0}
    spread = {**flag, "std": 0.05}
    assert two_valued_span({"f": flag}, "f") == 1.0
    assert two_valued_span({"f": spread}, "f") is None
    assert two_valued_span({"f": {**flag, "min": 1.0}}, "f") is None  # constant
    assert two_valued_span({"f": {**flag, "max": 3.0, "mean": 3 * p, "std": 3 * (p * (1 - p)) ** 0.5}}, "f") == 3.0
    stats = {"quiet": flag, "noisy": spread,
             "asset_id": {"count": 2, STATS_PER_ASSET: {"a": {"count": [50, 50], "mean": [0.0, 0.0], "std": [0.0, 0.0]},
                                                         "b": {"count": [50, 50], "mean": [0.02, 0.1], "std": [0.14, 0.1]}}}}
    _, _, variances = per_asset(SPEC, stats)
    # the flag: (1 / 2)^2 on a, b and the fleet's row; the other: its own std, floored at a quarter of the fleet's
    np.testing.assert_allclose([row[0] for row in variances], [0.25, 0.25, 0.25])
    np.testing.assert_allclose([row[1] for row in variances], [0.0125 ** 2, 0.01, 0.0025])
    model = build_autoencoder(SPEC, {}, stats, CONFIG.train.model)
    window = np.zeros((2, STEPS, 2), np.float32)
    window[:, :, 0] = 1.0  # the flag fires: 2 stds on a, (1 - 0.02) / 0.5 on b, not hundreds
    out = model.get_layer(STANDARDIZE)([tf.constant(window), tf.constant(["a", "b"])]).numpy()
    np.testing.assert_allclose(out[:, 0, 0], [2.0, 0.98 / 0.5], rtol=1e-6)
