"""`tfos evaluate`: an autoencoder's window scores against known anomaly intervals.

A window is anomalous when it overlaps an interval of the truth table (asset, start, end,
inclusive). The report: ROC AUC of the reconstruction error on the eval split's assets (which
training never saw) and on all windows, precision and recall of `is_anomaly`, recall per
anomaly kind, and the same AUCs for two plain scores (`data.baselines`) on the same windows, so
a user sees whether the model adds anything on their data. A figure that is not defined on the
data (an AUC without anomalous windows, a precision with nothing flagged) is reported as such,
with the reason, and the rest still are. It goes into the model's `metrics.json`
(`anomaly_auc` is the eval one) and a PNG shows, for a few eval assets, a sensor and the error
over time with the intervals shaded.

The eval assets are those the model's dataset put in eval: the split is drawn again from the
manifest the model carries, its boundary included.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

import numpy as np
import pandas as pd
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config, SplitConfig
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.dataset import Manifest, Split
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.data import baselines, columns, sources
from tfos_jobs.data import split as split_mod
from tfos_jobs.data.sensor_sources import read_rows, window_table
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START, FeatureSpec
from tfos_jobs.storage import Storage

TRUTH_COLUMNS = (columns.ANOMALY_START, columns.ANOMALY_END, columns.ANOMALY_KIND)  # and the key; sensor optional
KIND, SENSOR = columns.ANOMALY_KIND, columns.ANOMALY_SENSOR
ANOMALOUS = "anomalous"
EVAL, ALL = Split.EVAL.value, "all"  # the windows a figure is over: the eval assets', or every scored one
PLOTTED_ASSETS = 3
# The scores compared, in report order: the model's, then the baselines'.
SCORES = (contract.RECONSTRUCTION_ERROR, *baselines.NAMES)
SCORE_TITLES = {contract.RECONSTRUCTION_ERROR: "autoencoder (reconstruction_error)",
                baselines.PROFILE_DISTANCE: "distance from the train mean profile",
                baselines.WINDOW_STD: "window standard deviation"}


def evaluate(spark: SparkSession, config: Config, spec: FeatureSpec, scores_path: str, truth_path: str,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    key = spec.key.name
    storage = Storage(spark)
    export_dir = _export_dir(storage, config.predict.model)
    scores = _read(spark, "scores", scores_path)
    truth = _read(spark, "anomaly table", truth_path)
    missing = [c for c in (key, *TRUTH_COLUMNS) if c not in truth.columns]
    if missing:
        raise InputError(f"anomaly table {truth_path!r} lacks column(s) {missing}; it needs {key}, {', '.join(TRUTH_COLUMNS)}")
    split, eval_below = _split(storage, export_dir, config)
    labelled = label(scores, truth, key).withColumn(columns.SPLIT, split_mod.assign(split, key, eval_below))
    windows = window_table(spark, config, spec, config.predict.input).cache()  # read twice: profile, scores
    try:
        plain, not_plain = _baseline_scores(windows, spec, storage, export_dir, split, eval_below)
        if plain is not None:
            labelled = labelled.join(plain, [key, WINDOW_START], "left")
        else:
            labelled = labelled.withColumns({name: F.lit(None).cast("double") for name in baselines.NAMES})
        rows: pd.DataFrame = labelled.select(key, WINDOW_START, *SCORES, contract.IS_ANOMALY, ANOMALOUS, KIND,
                                             columns.SPLIT).toPandas()
    finally:
        windows.unpersist()
    if rows.empty:
        raise InputError(f"no scored windows in {scores_path!r}")
    report = _report(rows, not_plain)
    model_dir = ModelDir(storage.qualify(config.train.model_dir))
    metrics = json.loads(storage.read_text(model_dir.metrics)) if storage.exists(model_dir.metrics) else {}
    metrics.update(report)
    storage.write_text(model_dir.metrics, json.dumps(metrics, indent=2))
    with tempfile.TemporaryDirectory(prefix="tfos-plot-") as tmp:
        _plot(spark, config, spec, rows, truth, f"{tmp}/anomalies.png", metrics.get("anomaly", {}).get("threshold"))
        if os.path.exists(f"{tmp}/anomalies.png"):
            storage.upload_file(f"{tmp}/anomalies.png", model_dir.anomaly_plot)
    for line in describe(report):
        log(line)
    log(f"plot: {model_dir.anomaly_plot}")
    return report


def _read(spark: SparkSession, what: str, path: str) -> DataFrame:
    try:
        return spark.read.parquet(path)
    except AnalysisException as e:
        raise InputError(f"{what} {path!r}: {sources.explain(e)}") from None


def _export_dir(storage: Storage, model: str) -> str:
    from udfs.register import resolve_export_dir

    return resolve_export_dir(storage, model)


def _split(storage: Storage, export_dir: str, config: Config) -> tuple[SplitConfig, int | None]:
    """The split of the dataset the model was trained on (its manifest asset); for a model
    exported without one, the config's."""
    path = contract.manifest_asset(export_dir)
    if storage.exists(path):
        return split_mod.from_manifest(Manifest.from_dict(json.loads(storage.read_text(path))).split)
    return config.prepare.split, None


def _baseline_scores(windows: DataFrame, spec: FeatureSpec, storage: Storage, export_dir: str,
                     split: SplitConfig, eval_below: int | None) -> tuple[DataFrame | None, dict[str, str]]:
    """The baselines of `windows` (key, window_start, one column each), the profile from their
    train windows; and, for each baseline that cannot be had, why."""
    try:
        standardizer = baselines.Standardizer.of(spec, json.loads(storage.read_text(contract.stats_asset(export_dir))))
    except ValueError as e:
        return None, dict.fromkeys(baselines.NAMES, f"the model's statistics: {e}")
    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    train = windows.where(split_mod.assign(split, spec.key.name, eval_below) == Split.TRAIN)
    profile = baselines.mean_profile(train, standardizer)
    why = {} if profile is not None else {
        baselines.PROFILE_DISTANCE: "no window of a train asset among the scored source's windows"}
    return baselines.scores(windows, [spec.key.name, WINDOW_START], standardizer, profile), why


def _report(rows: pd.DataFrame, not_computed: dict[str, str]) -> dict[str, Any]:
    """Every figure the windows define; `not_computed` says, for each one they do not, why."""
    ev = rows[rows[columns.SPLIT] == Split.EVAL]
    why = dict(not_computed)
    aucs: dict[str, dict[str, float | None]] = {}
    for name in SCORES:
        aucs[name] = {}
        for part, subset, what in ((EVAL, ev, "the eval assets' windows"), (ALL, rows, "the scored windows")):
            known = subset[subset[name].notna()]
            auc = roc_auc(known[ANOMALOUS].to_numpy(), known[name].to_numpy(dtype=np.float64))
            aucs[name][part] = auc
            if auc is None and name not in not_computed:
                why.setdefault(f"{name} ROC AUC ({part})", _no_auc(known, what))
    flagged, actual = ev[contract.IS_ANOMALY].astype(bool), ev[ANOMALOUS].astype(bool)
    hits = int((flagged & actual).sum())
    precision = round(hits / int(flagged.sum()), 4) if flagged.any() else None
    recall = round(hits / int(actual.sum()), 4) if actual.any() else None
    if precision is None:
        why["is_anomaly precision (eval)"] = f"is_anomaly flagged none of the eval assets' {len(ev):,} windows"
    if recall is None:
        why["is_anomaly recall (eval)"] = _no_auc(ev, "the eval assets' windows")
    model = aucs[contract.RECONSTRUCTION_ERROR]
    return {
        "anomaly_auc": model[EVAL],
        "anomaly_auc_all": model[ALL],
        "windows": {EVAL: len(ev), ALL: len(rows), "anomalous_eval": int(actual.sum()),
                    "anomalous_all": int(rows[ANOMALOUS].sum())},
        "is_anomaly_eval": {"flagged": int(flagged.sum()), "precision": precision, "recall": recall},
        "recall_by_kind_eval": {str(kind): round(float(g[contract.IS_ANOMALY].mean()), 4)
                                for kind, g in ev[ev[ANOMALOUS]].groupby(KIND)},
        "baselines": {name: aucs[name] for name in baselines.NAMES},
        "not_computed": why,
    }


def _no_auc(windows: pd.DataFrame, what: str) -> str:
    if windows.empty:
        return f"no scored window among {what}"
    anomalous = int(windows[ANOMALOUS].sum())
    if anomalous == 0:
        return f"none of {what} ({len(windows):,}) overlaps a true anomaly"
    return f"every one of {what} ({len(windows):,}) overlaps a true anomaly"


def describe(report: dict[str, Any]) -> list[str]:
    """The report as console lines: the scores side by side, then what could not be computed."""
    w = report["windows"]
    lines = [f"windows: {w[EVAL]:,} of eval assets ({w['anomalous_eval']:,} overlap a true anomaly), "
             f"{w[ALL]:,} in all ({w['anomalous_all']:,})",
             f"  {'ROC AUC of':<40} {EVAL:>7} {ALL:>7}"]
    aucs = {contract.RECONSTRUCTION_ERROR: {EVAL: report["anomaly_auc"], ALL: report["anomaly_auc_all"]},
            **report["baselines"]}
    for name in SCORES:
        lines.append(f"  {SCORE_TITLES[name]:<40} {_figure(aucs[name][EVAL]):>7} {_figure(aucs[name][ALL]):>7}")
    pr = report["is_anomaly_eval"]
    lines.append(f"is_anomaly on the eval assets: {pr['flagged']:,} flagged, precision {_figure(pr['precision'])}, "
                 f"recall {_figure(pr['recall'])}")
    lines += [f"not computed: {figure}: {reason}" for figure, reason in report["not_computed"].items()]
    return lines


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def label(scores: DataFrame, truth: DataFrame, key: str) -> DataFrame:
    """Each window with `anomalous` (overlaps an interval) and the first overlapping interval's kind."""
    t = truth.select(F.col(key).alias("_t_key"), F.col(columns.ANOMALY_START).cast("timestamp").alias("_t_start"),
                     F.col(columns.ANOMALY_END).cast("timestamp").alias("_t_end"),
                     F.col(columns.ANOMALY_KIND).alias("_t_kind"))
    overlap = (F.col(key) == F.col("_t_key")) & (F.col("_t_start") <= F.col(WINDOW_END)) \
        & (F.col("_t_end") >= F.col(WINDOW_START))
    joined = scores.join(F.broadcast(t), overlap, "left")
    return joined.groupBy(*[c for c in scores.columns if c != contract.LATENT]).agg(
        F.count("_t_key").alias("_hits"), F.min("_t_kind").alias(KIND)) \
        .withColumn(ANOMALOUS, F.col("_hits") > 0).drop("_hits")


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


def _plot(spark: SparkSession, config: Config, spec: FeatureSpec, rows, truth: DataFrame, path: str,
          threshold: float | None) -> None:
    """For a few eval assets with anomalies: the anomalous sensor's trace and the window error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    key = spec.key.name
    ev = rows[rows[columns.SPLIT] == Split.EVAL]
    assets = sorted(ev.loc[ev[ANOMALOUS], key].unique())[:PLOTTED_ASSETS] or sorted(ev[key].unique())[:1]
    if not assets:
        return
    intervals: pd.DataFrame = truth.where(F.col(key).isin(assets)).toPandas()
    raw, _ = read_rows(spark, config, spec)
    traces: pd.DataFrame = raw.where(F.col(key).isin(assets) & F.col(columns.CORRUPT).isNull()) \
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
