"""The recurrent autoencoder for sensor windows, built from the feature spec.

Input: each window's key (its asset, a string) and one `[batch, window]` float tensor per sensor (raw values, as the
records and the UDF carry them). In the graph: stacked to `[batch, window, sensors]`, standardised with the train
split's statistics of the window's asset (`standardize = "per_asset"`; the fleet's for an asset the model never saw, or
with `standardize = "fleet"`) and clipped to +-`clip`, encoded by a GRU or LSTM to a `latent` vector, decoded by a
second one from that vector repeated over the window, and compared with the standardised input. The model's output is
that per-window `reconstruction_error`, so training minimises its mean (the MSE) and serving gets it without a second
graph. Standardising in the graph means a served model takes raw windows and needs nothing but its SavedModel.

Fleets of unlike machines differ in level and spread: standardised by the fleet's statistics, a machine whose normal
sits far from the fleet's is scored as always anomalous, and a fault on a machine with a narrow range hides in the
fleet's spread (on MSL's 27 channels ROC AUC 0.53 -> 0.58, AUPRC 0.131 -> 0.148; docs/prepare.md).

The served score weighs each sensor's squared error by the inverse of its mean over the train windows
(`error_scale = "per_sensor"`, the default): on real server metrics some sensors are noisy in normal times, and an
unweighted mean lets their errors drown a fault that shows on a quiet one (on ASD's test period, ROC AUC 0.78 -> 0.86
and AUPRC 0.35 -> 0.61, docs/prepare.md). A window is flagged above its asset's own threshold (`error_quantiles`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from tfos_jobs.config import ModelConfig
from tfos_jobs.contracts.serving import LATENT, RECONSTRUCTION_ERROR
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.features.standardisation import per_asset, standardisation
from tfos_jobs.tasks import ModelKind

STANDARDIZE = "standardize"  # the AssetStandardization layer: its `rows` place a window's asset among the per-asset constants

if TYPE_CHECKING:
    import tensorflow as tf


def build_autoencoder(spec: FeatureSpec, vocab: dict[str, list[str]], stats: dict[str, Any],
                      model_cfg: ModelConfig) -> "tf.keras.Model":
    """Same arguments as `builder.build_model` (`vocab` is unused: sensors have none)."""
    import tensorflow as tf

    from tfos_jobs.model.layers import ReconstructionError

    layers = tf.keras.layers
    steps, sensors = spec.time.window, spec.sequences
    inputs = {f.name: tf.keras.Input(shape=(steps,), dtype="float32", name=f.name) for f in sensors}
    columns = [layers.Reshape((steps, 1), name=f"steps_{f.name}")(inputs[f.name]) for f in sensors]
    x = columns[0] if len(columns) == 1 else layers.Concatenate(axis=-1, name="window")(columns)
    target = _standardised(x, inputs, spec, stats, model_cfg)
    # The generic RNN over a cell, not layers.GRU/LSTM: those pin an op to the device they were
    # traced on (`/job:chief/...` under a TF cluster), and the exported model would then not
    # load anywhere else. On CPUs both run the same loop.
    cell = {"gru": layers.GRUCell, "lstm": layers.LSTMCell}[model_cfg.cell]
    encoded = layers.RNN(cell(model_cfg.units), name="encoder")(target)
    latent = layers.Dense(model_cfg.latent_dim, name=LATENT)(encoded)
    repeated = layers.RepeatVector(steps, name="repeat_latent")(latent)
    decoded = layers.RNN(cell(model_cfg.units), return_sequences=True, name="decoder")(repeated)
    reconstruction = layers.TimeDistributed(layers.Dense(len(sensors)), name="reconstruction")(decoded)
    error = ReconstructionError(name=RECONSTRUCTION_ERROR)([reconstruction, target])
    return tf.keras.Model(inputs=inputs, outputs=error, name=ModelKind.SEQUENCE_AUTOENCODER.value)


def _standardised(x: "tf.Tensor", inputs: dict[str, Any], spec: FeatureSpec, stats: dict[str, Any],
                  model_cfg: ModelConfig) -> "tf.Tensor":
    """The [batch, steps, sensors] window standardised by its asset's train statistics
    (`standardize = "per_asset"`; an asset the model never saw takes the fleet's), or by the
    fleet's. The key is an input either way: the served score's threshold is per asset too."""
    import tensorflow as tf

    from tfos_jobs.model.layers import AssetStandardization

    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    key = inputs[spec.key.name] = tf.keras.Input(shape=(), dtype="string", name=spec.key.name)
    assets, means, variances = per_asset(spec, stats)
    if model_cfg.standardize == "fleet":  # the assets stay known, for their thresholds
        means, variances = [means[-1]] * len(means), [variances[-1]] * len(variances)
    fleet_first = (means[-1:] + means[:-1], variances[-1:] + variances[:-1])
    return AssetStandardization(assets, *fleet_first, clip=model_cfg.clip or None, name=STANDARDIZE)([x, key])


def scoring_model(model: "tf.keras.Model", scale: Sequence[float] | None = None) -> "tf.keras.Model":
    """The trained autoencoder with its latent vector as a second output (same weights), its
    error weighed per sensor by `scale` (`sensor_scale`)."""
    import tensorflow as tf

    from tfos_jobs.model.layers import ReconstructionError

    error = model.output
    if scale is not None:
        reconstruction, target = model.get_layer(RECONSTRUCTION_ERROR).input
        error = ReconstructionError(scale, name=f"{RECONSTRUCTION_ERROR}_scaled")([reconstruction, target])
    return tf.keras.Model(inputs=model.inputs, outputs={LATENT: model.get_layer(LATENT).output,
                                                        RECONSTRUCTION_ERROR: error})


def sensor_scale(model: "tf.keras.Model", files: list[str], spec: FeatureSpec, compression: str,
                 limit: int = 50_000) -> list[float]:
    """One weight per sensor: the inverse of its mean squared error over (up to `limit`) train
    windows, so that each sensor's error counts in units of its own normal error."""
    import numpy as np
    import tensorflow as tf

    from tfos_jobs.data import reader

    parts = tf.keras.Model(inputs=model.inputs, outputs=model.get_layer(RECONSTRUCTION_ERROR).input)
    total, count = np.zeros(len(spec.sequences)), 0
    for features, _ in reader.make_dataset(files, spec, 1024, compression=compression).take(-(-limit // 1024)):
        reconstruction, target = (t.numpy().astype(np.float64) for t in parts(features, training=False))
        total += ((reconstruction - target) ** 2).sum(axis=(0, 1))
        count += reconstruction.shape[0] * reconstruction.shape[1]
    mean = total / max(count, 1)
    return [float(1.0 / max(m, 1e-6)) for m in mean]


def error_as_loss(y_true: "tf.Tensor", y_pred: "tf.Tensor") -> "tf.Tensor":
    """The model's output is the per-window error already; the label is ignored."""
    return y_pred


def error_quantiles(scorer: "tf.keras.Model", files: list[str], spec: FeatureSpec, compression: str,
                    quantile: float, limit: int = 200_000) -> tuple[float, dict[str, float]]:
    """The `quantile` of the served reconstruction errors (`scoring_model`'s) of (up to `limit`)
    train windows, for the fleet and for each asset with at least `1 / (1 - quantile)` windows
    (fewer, and the quantile is its largest error): the anomaly thresholds, fixed with the model."""
    import numpy as np

    from tfos_jobs.data import reader

    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    errors, assets = [], []
    for features, _ in reader.make_dataset(files, spec, 1024, compression=compression).take(-(-limit // 1024)):
        errors.append(scorer(features, training=False)[RECONSTRUCTION_ERROR].numpy())
        assets.append(features[spec.key.name].numpy())
    error, asset = np.concatenate(errors), np.concatenate(assets)
    enough = int(np.ceil(1.0 / (1.0 - quantile) - 1e-9))  # 100 for 0.99, whatever the rounding
    names, counts = np.unique(asset, return_counts=True)
    own = {name.decode(): float(np.quantile(error[asset == name], quantile))
           for name, n in zip(names, counts) if n >= enough}
    return float(np.quantile(error, quantile)), own
