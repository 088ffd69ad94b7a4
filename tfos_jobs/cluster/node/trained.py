"""The trained model, judged on the chief before it reports (`cluster.node.training`): the epoch whose weights it holds,
a split's metrics, its outputs on a few eval rows, and a sensor model's anomaly threshold."""
from __future__ import annotations

from tfos_jobs.contracts.metrics import Anomaly, SamplePredictions
from tfos_jobs.data import reader


def anomaly(model, train_files: list[str], spec, compression: str, model_cfg, is_chief: bool) -> Anomaly:
    """An autoencoder's sensor weights and threshold, from the train windows (on the chief; the
    other nodes' exports only need the graph's shape)."""
    from tfos_jobs.model.sequence import STANDARDIZE, error_quantiles, scoring_model, sensor_scale

    sensors = [f.name for f in spec.sequences]
    quantile, scale_kind = model_cfg.anomaly_quantile, model_cfg.error_scale
    assets = model.get_layer(STANDARDIZE).assets
    if scale_kind == "none":
        rows = None
    elif is_chief:
        rows = sensor_scale(model, train_files, spec, compression, by_asset=scale_kind == "per_asset")
    else:
        rows = [[1.0] * len(sensors)] * (len(assets) + 1)
    fleet = None if rows is None else dict(zip(sensors, rows[0]))
    own = ({a: dict(zip(sensors, row)) for a, row in zip(assets, rows[1:])}
           if rows is not None and scale_kind == "per_asset" else None)
    if not is_chief:
        return Anomaly(quantile=quantile, threshold=0.0, thresholds={}, sensor_scale=fleet, asset_sensor_scale=own)
    threshold, thresholds = error_quantiles(scoring_model(model, rows), train_files, spec, compression, quantile)
    return Anomaly(quantile=quantile, threshold=threshold, thresholds=thresholds, sensor_scale=fleet,
                   asset_sensor_scale=own)


def kept_epoch(history, stopper) -> int:
    """The index in `history` of the epoch whose weights the model holds: the last, or the one
    early stopping restored. A relaunched run's early stopping knows the epochs since the resume
    only (Keras keeps no stopping state in its backup)."""
    if stopper is None or stopper.best_weights is None or stopper.best_epoch not in history.epoch:
        return -1
    return history.epoch.index(stopper.best_epoch)


def split_metrics(model, files: list[str], spec, compression: str, batch_size: int) -> dict[str, float]:
    """Loss and metrics of the trained model on the held-out test split, on the chief alone
    (read once, after every choice was made on eval): the label task's, which compare with any
    other model's and the baselines', and those a model compiled by its own function with (its
    loss as `loss`, and its own metrics in place of the task's of the same name)."""
    import tensorflow as tf

    from tfos_jobs.model.builder import loss_and_metrics, own_compile

    loss_fn, metrics = loss_and_metrics(spec)
    own = own_compile(model)
    if own is not None:
        if "loss" in own:
            loss_fn = tf.keras.losses.get(own["loss"])
        mine = [m for m in (_fresh(m) for m in own.get("metrics") or []) if m is not None]
        metrics = [m for m in metrics if m.name not in {n.name for n in mine}] + mine
    loss = tf.keras.metrics.Mean(name="loss")
    for features, labels in reader.make_dataset(files, spec, max(batch_size, 1024), compression=compression):
        outputs = model(features, training=False)  # eager, as sample_predictions: any strategy's variables
        loss.update_state(loss_fn(labels, outputs), sample_weight=tf.shape(labels)[0])
        for metric in metrics:
            metric.update_state(labels, outputs)
    return {m.name: float(m.result()) for m in (loss, *metrics)}


def _fresh(metric):
    """A metric as compiled (a name or an object that training filled), new and empty; None for "accuracy", which
    Keras resolves by the output's shape and the task's own accuracy already reports."""
    import tensorflow as tf

    if isinstance(metric, str):
        if metric in ("accuracy", "acc"):
            return None
        found = tf.keras.metrics.get(metric)
        return found if isinstance(found, tf.keras.metrics.Metric) else tf.keras.metrics.MeanMetricWrapper(found, name=metric)
    if isinstance(metric, tf.keras.metrics.Metric):
        return type(metric).from_config(metric.get_config())
    return tf.keras.metrics.MeanMetricWrapper(metric, name=getattr(metric, "__name__", "metric"))


def sample_predictions(model, files: list[str], spec, compression: str, rows: int = 32) -> SamplePredictions:
    """The trained model's outputs on a few eval rows, kept with the rows, so the exported
    SavedModel can be checked against the model that was actually trained."""
    features, _ = next(iter(reader.make_dataset(files, spec, rows, compression=compression)))
    outputs = model(features, training=False)
    return SamplePredictions(rows={name: _decoded(t.numpy().tolist()) for name, t in features.items()},
                             outputs=outputs.numpy().tolist())


def _decoded(values: list) -> list:
    """Text as str, in a column of scalars or of lists (a list feature's elements): JSON has no bytes."""
    return [_decoded(v) if isinstance(v, list) else v.decode() if isinstance(v, bytes) else v for v in values]
