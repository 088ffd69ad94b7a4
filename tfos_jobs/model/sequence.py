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

The served score weighs each sensor's squared error by the inverse of its mean over the train windows, lower on an
asset where the sensor's own is larger (`error_scale = "per_asset"`, the default; `"per_sensor"`: the fleet's weights
everywhere): on real server metrics some sensors are noisy in normal times, and an unweighted mean lets their errors
drown a fault that shows on a quiet one (on ASD's test period, ROC AUC 0.78 -> 0.86 and AUPRC 0.35 -> 0.61,
docs/prepare.md). Past the clip a value's error grows with the log of its excess (`layers.WindowScore`), so how far
out a reading lies still ranks the windows of one machine. A window is flagged above its asset's own threshold
(`error_quantiles`)."""
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


def scoring_model(model: "tf.keras.Model", scale: Sequence[Sequence[float]] | None = None) -> "tf.keras.Model":
    """The trained autoencoder with its latent vector as a second output (same weights), its
    error the served score (`layers.WindowScore`): weighed per sensor by `scale`, the fleet's row
    and then one per asset of the standardisation (`sensor_scale`), and growing slowly past the
    model's clip."""
    import tensorflow as tf

    from tfos_jobs.model.layers import WindowScore

    standardize = model.get_layer(STANDARDIZE)
    window, key = standardize.input
    reconstruction, target = model.get_layer(RECONSTRUCTION_ERROR).input
    rows = standardize.rows(key)  # the model's own lookup: a table the exported model tracks
    error = WindowScore(standardize.mean, standardize.variance, scale, clip=standardize.clip,
                        name=f"{RECONSTRUCTION_ERROR}_score")([reconstruction, target, window, rows])
    return tf.keras.Model(inputs=model.inputs, outputs={LATENT: model.get_layer(LATENT).output,
                                                        RECONSTRUCTION_ERROR: error})


def sensor_scale(model: "tf.keras.Model", files: list[str], spec: FeatureSpec, compression: str,
                 by_asset: bool, limit: int = 50_000) -> list[list[float]]:
    """Each sensor's weight in the served score: the fleet's row, then one per asset of the
    model's standardisation. The fleet's is the inverse of the sensor's mean squared error over
    (up to `limit`) train windows, so that each sensor counts in units of its normal error. With
    `by_asset`, an asset's weight is the inverse of its own windows' error where that is the
    larger (a sensor noisy on this machine counts less here), else the fleet's: never more, so a
    sensor quiet on one machine does not make each of its wobbles an alarm. Otherwise every row
    is the fleet's."""
    import numpy as np
    import tensorflow as tf

    from tfos_jobs.data import reader

    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    assets = model.get_layer(STANDARDIZE).assets
    parts = tf.keras.Model(inputs=model.inputs, outputs=model.get_layer(RECONSTRUCTION_ERROR).input)
    row_of = {a.encode(): 1 + i for i, a in enumerate(assets)}
    total, count = np.zeros((len(assets) + 1, len(spec.sequences))), np.zeros(len(assets) + 1)
    for features, _ in reader.make_dataset(files, spec, 1024, compression=compression).take(-(-limit // 1024)):
        reconstruction, target = (t.numpy().astype(np.float64) for t in parts(features, training=False))
        squared = ((reconstruction - target) ** 2).sum(axis=1)  # [windows, sensors], summed over the steps
        rows = np.array([row_of.get(k, 0) for k in features[spec.key.name].numpy().reshape(-1)])
        np.add.at(total, rows, squared)  # row 0: windows of an asset the standardisation does not know
        np.add.at(count, rows, reconstruction.shape[1])
    mean = total / np.maximum(count, 1)[:, np.newaxis]
    fleet = 1.0 / np.maximum(total.sum(axis=0) / max(count.sum(), 1), 1e-6)
    own = np.where(count[:, np.newaxis] > 0, 1.0 / np.maximum(mean, 1e-6), fleet)
    rows = np.minimum(own[1:], fleet) if by_asset else np.tile(fleet, (len(assets), 1))
    return [fleet.tolist(), *rows.tolist()]


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
