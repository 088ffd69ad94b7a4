"""`tfos evaluate`: an autoencoder's window scores against known anomaly intervals.

A window is anomalous when it overlaps an interval of the truth table (asset, start, end,
inclusive). The report: ROC AUC of the reconstruction error on the eval split's assets (which
training never saw) and on all windows, precision and recall of `is_anomaly`, recall per
anomaly kind. It goes into the model's `metrics.json` (`anomaly_auc` is the eval one) and a
PNG shows, for a few eval assets, a sensor and the error over time with the intervals shaded.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.data import columns, transforms
from tfos_jobs.data.sensor_sources import read_rows
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START, FeatureSpec
from tfos_jobs.storage import Storage

TRUTH_COLUMNS = (columns.ANOMALY_START, columns.ANOMALY_END, columns.ANOMALY_KIND)  # and the key; sensor optional
KIND, SENSOR = columns.ANOMALY_KIND, columns.ANOMALY_SENSOR
PLOTTED_ASSETS = 3


def evaluate(spark: SparkSession, config: Config, spec: FeatureSpec, scores_path: str, truth_path: str,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    key = spec.key.name
    scores = spark.read.parquet(scores_path)
    truth = spark.read.parquet(truth_path)
    missing = [c for c in (key, *TRUTH_COLUMNS) if c not in truth.columns]
    if missing:
        raise InputError(f"anomaly table {truth_path!r} lacks column(s) {missing}; it needs {key}, {', '.join(TRUTH_COLUMNS)}")
    labelled = _label(scores, truth, key).withColumn(columns.SPLIT, transforms.split_column(config.prepare.split, key))
    rows = labelled.select(key, WINDOW_START, contract.RECONSTRUCTION_ERROR, contract.IS_ANOMALY, "anomalous",
                           KIND, columns.SPLIT).toPandas()
    if rows.empty:
        raise InputError(f"no scored windows in {scores_path!r}")
    ev = rows[rows[columns.SPLIT] == "eval"]
    report = {
        "anomaly_auc": roc_auc(ev["anomalous"].to_numpy(), ev[contract.RECONSTRUCTION_ERROR].to_numpy()),
        "anomaly_auc_all": roc_auc(rows["anomalous"].to_numpy(), rows[contract.RECONSTRUCTION_ERROR].to_numpy()),
        "windows": {"eval": len(ev), "all": len(rows), "anomalous_eval": int(ev["anomalous"].sum()),
                    "anomalous_all": int(rows["anomalous"].sum())},
        "is_anomaly_eval": _precision_recall(ev),
        "recall_by_kind_eval": {str(kind): round(float(g[contract.IS_ANOMALY].mean()), 4)
                                for kind, g in ev[ev["anomalous"]].groupby(KIND)},
    }
    storage = Storage(spark)
    model_dir = ModelDir(storage.qualify(config.train.model_dir))
    metrics = json.loads(storage.read_text(model_dir.metrics)) if storage.exists(model_dir.metrics) else {}
    metrics.update(report)
    storage.write_text(model_dir.metrics, json.dumps(metrics, indent=2))
    with tempfile.TemporaryDirectory(prefix="tfos-plot-") as tmp:
        _plot(spark, config, spec, rows, truth, f"{tmp}/anomalies.png", metrics.get("anomaly", {}).get("threshold"))
        if os.path.exists(f"{tmp}/anomalies.png"):
            storage.upload_file(f"{tmp}/anomalies.png", model_dir.anomaly_plot)
    log(f"anomaly ROC AUC {report['anomaly_auc']:.4f} on the eval assets' {len(ev):,} windows "
        f"({report['windows']['anomalous_eval']:,} overlap a true anomaly), {report['anomaly_auc_all']:.4f} on all "
        f"{len(rows):,}; is_anomaly precision {report['is_anomaly_eval']['precision']:.3f} "
        f"recall {report['is_anomaly_eval']['recall']:.3f}")
    log(f"plot: {model_dir.anomaly_plot}")
    return report


def _label(scores: DataFrame, truth: DataFrame, key: str) -> DataFrame:
    """Each window with `anomalous` (overlaps an interval) and the first overlapping interval's kind."""
    t = truth.select(F.col(key).alias("_t_key"), F.col(columns.ANOMALY_START).cast("timestamp").alias("_t_start"),
                     F.col(columns.ANOMALY_END).cast("timestamp").alias("_t_end"),
                     F.col(columns.ANOMALY_KIND).alias("_t_kind"))
    overlap = (F.col(key) == F.col("_t_key")) & (F.col("_t_start") <= F.col(WINDOW_END)) \
        & (F.col("_t_end") >= F.col(WINDOW_START))
    joined = scores.join(F.broadcast(t), overlap, "left")
    return joined.groupBy(*[c for c in scores.columns if c != contract.LATENT]).agg(
        F.count("_t_key").alias("_hits"), F.min("_t_kind").alias(KIND)) \
        .withColumn("anomalous", F.col("_hits") > 0).drop("_hits")


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve (ties counted half), from ranks: the probability that a
    random anomalous window scores above a random normal one."""
    labels = labels.astype(bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    sorted_scores = scores[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    for start, n in zip(first[counts > 1], counts[counts > 1]):
        ranks[order[start:start + n]] = start + (n + 1) / 2
    auc = (ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives)
    return round(float(auc), 6)


def _precision_recall(rows) -> dict[str, float]:
    flagged, actual = rows[contract.IS_ANOMALY].astype(bool), rows["anomalous"].astype(bool)
    hits = int((flagged & actual).sum())
    return {"flagged": int(flagged.sum()), "precision": round(hits / max(int(flagged.sum()), 1), 4),
            "recall": round(hits / max(int(actual.sum()), 1), 4)}


def _plot(spark: SparkSession, config: Config, spec: FeatureSpec, rows, truth: DataFrame, path: str,
          threshold: float | None) -> None:
    """For a few eval assets with anomalies: the anomalous sensor's trace and the window error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = spec.key.name
    ev = rows[rows[columns.SPLIT] == "eval"]
    assets = sorted(ev.loc[ev["anomalous"], key].unique())[:PLOTTED_ASSETS] or sorted(ev[key].unique())[:1]
    if not assets:
        return
    intervals = truth.where(F.col(key).isin(assets)).toPandas()
    raw, _ = read_rows(spark, config, spec)
    traces = raw.where(F.col(key).isin(assets) & F.col(columns.CORRUPT).isNull()) \
        .select(key, spec.time.name, *spec.model_inputs).toPandas()
    fig, axes = plt.subplots(2 * len(assets), 1, figsize=(12, 3.2 * len(assets)), squeeze=False)
    for i, asset in enumerate(assets):
        mine = intervals[intervals[key] == asset]
        sensor = str(mine[SENSOR].iloc[0]) if SENSOR in mine and len(mine) else spec.model_inputs[0]
        trace = traces[traces[key] == asset].sort_values(spec.time.name)
        scored = ev[ev[key] == asset].sort_values(WINDOW_START)
        top, bottom = axes[2 * i][0], axes[2 * i + 1][0]
        top.plot(trace[spec.time.name], trace[sensor], lw=0.6)
        top.set_ylabel(sensor)
        top.set_title(f"{asset}: {sensor} and the reconstruction error of its windows (true anomalies shaded)")
        bottom.step(scored[WINDOW_START], scored[contract.RECONSTRUCTION_ERROR], where="post", lw=0.8)
        if threshold is not None:
            bottom.axhline(threshold, color="tab:red", ls="--", lw=0.8, label="is_anomaly threshold")
            bottom.legend(loc="upper right")
        bottom.set_yscale("log")
        bottom.set_ylabel("reconstruction error")
        for _, interval in mine.iterrows():
            for ax in (top, bottom):
                ax.axvspan(interval[columns.ANOMALY_START], interval[columns.ANOMALY_END], color="tab:orange", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
