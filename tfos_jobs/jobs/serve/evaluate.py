"""`tfos evaluate`: an autoencoder's window scores against known anomaly intervals, beside the
plain scores a data scientist would try first, on exactly the same windows.

The windows judged are the scored ones the model did not train on: every window of the scores (`tfos predict`'s output)
except those of the train split its dataset was prepared with (the split is drawn again from the manifest the model
carries; a window spanning a time split's instant is left out too). Scoring the dataset's own source, that is the eval
(and test) windows; scoring a later period (the field's protocol: fit on one period, score the next), it is all of them.
A window is anomalous when it overlaps an interval of the truth table (asset, start, end inclusive).

The figures the field reports, for the fleet and per asset: ROC AUC and AUPRC of the reconstruction error and of each
baseline (`data.baselines`, fitted on the train windows and computed from the same raw rows, cut by the same code) on
the windows, and VUS-PR and VUS-ROC on the readings the windows cover (TSB-AD's definitions, `data.vus`: its primary
figure, threshold-free and tolerant of small misalignments at range edges; the fleet's is the mean over assets); at
the model's threshold (`is_anomaly`) window precision and recall, event recall (incidents with a flagged window) and
event precision (runs of flagged windows that meet an incident), and the point-adjusted F1 beside a random score's at
the same number flagged (it flatters any score; Kim et al., AAAI 2022). A figure the windows do not define is reported
as such with the reason. All of it goes into the model's `metrics.json` (`evaluation`), and a PNG shows, for a few
assets with incidents, a sensor and the error over the judged period on one time axis, the incidents shaded.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Callable, Literal

import pandas as pd
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config, SplitConfig
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.dataset import Manifest, Split
from tfos_jobs.contracts.metrics import Evaluation, Ranking
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.data import baselines, columns, sources
from tfos_jobs.data import anomaly_figures, vus
from tfos_jobs.data.anomaly_figures import ANOMALOUS, KIND, MODEL, SCORES, TITLES
from tfos_jobs.data import split as split_mod
from tfos_jobs.data.sensor_sources import of_source, read_rows, split_windows, window_table
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START, FeatureSpec
from tfos_jobs.storage import Storage
from udfs.model_location import locate_saved_model

TRUTH_COLUMNS = (columns.ANOMALY_START, columns.ANOMALY_END, columns.ANOMALY_KIND)  # and the key; sensor optional
SENSOR = columns.ANOMALY_SENSOR
PLOTTED_ASSETS = 3
PRINTED_ASSETS = 12  # per-asset lines printed (the model's weakest first); metrics.json has every asset
Figure = Literal["roc_auc", "auprc", "vus_roc", "vus_pr"]  # a key of a score's `Ranking` (the type checker holds them)
FIGURES: dict[Figure, str] = {"roc_auc": "ROC AUC", "auprc": "AUPRC", "vus_roc": "VUS-ROC", "vus_pr": "VUS-PR"}  # the
# table's columns and the plot's panels, in order


def evaluate(spark: SparkSession, config: Config, spec: FeatureSpec, scores_path: str, truth_path: str,
             log: Callable[[str], None] = print) -> Evaluation:
    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    key = spec.key.name
    storage = Storage(spark)
    export_dir = locate_saved_model(storage, config.predict.model, setting="predict.model")
    scores, truth = _read(spark, "scores", scores_path), _read(spark, "anomaly table", truth_path)
    missing = [c for c in (key, *TRUTH_COLUMNS) if c not in truth.columns]
    if missing:
        raise InputError(f"anomaly table {truth_path!r} lacks column(s) {missing}; it needs {key}, {', '.join(TRUTH_COLUMNS)}")
    split, eval_below = _split(storage, export_dir, config)
    dataset = split_windows(spark, config, spec, split, eval_below).cache()  # train windows, and what to leave out
    scored = window_table(spark, config, spec, config.predict.input).cache()  # the scored windows' raw values
    try:
        seen = dataset.where(F.col(columns.SPLIT).isin(Split.TRAIN.value, split_mod.BOUNDARY)).select(key, WINDOW_START)
        judged = label(scores, truth, key).join(seen, [key, WINDOW_START], "left_anti")
        train = dataset.where(F.col(columns.SPLIT) == Split.TRAIN.value)
        plain, not_plain = _baseline_scores(train, scored.join(judged.select(key, WINDOW_START), [key, WINDOW_START]),
                                            spec, storage, export_dir)
        if plain is not None:
            judged = judged.join(plain, [key, WINDOW_START], "left")
        else:
            judged = judged.withColumns({name: F.lit(None).cast("double") for name in baselines.NAMES}) \
                .withColumn(baselines.FIT, F.lit(None).cast("string"))
        rows: pd.DataFrame = judged.select(key, WINDOW_START, WINDOW_END, *SCORES, contract.IS_ANOMALY, ANOMALOUS, KIND,
                                           baselines.FIT).toPandas()
    finally:
        dataset.unpersist()
        scored.unpersist()
    if rows.empty:
        raise InputError(f"no window of {scores_path!r} is outside the model's train split: score windows the model "
                         "did not train on (predict.input = a later period, or the dataset's own source for its eval "
                         "windows)")
    intervals: pd.DataFrame = truth.select(key, *TRUTH_COLUMNS).toPandas()
    model_dir = ModelDir(storage.qualify(config.train.model_dir))
    metrics = json.loads(storage.read_text(model_dir.metrics)) if storage.exists(model_dir.metrics) else {}
    anomaly = metrics.get("anomaly") or {}
    report = anomaly_figures.report(rows, intervals, key, not_plain, anomaly.get("threshold"),
                                    step_seconds=spec.time.step_seconds)
    metrics["evaluation"] = report
    storage.write_text(model_dir.metrics, json.dumps(metrics, indent=2))
    with tempfile.TemporaryDirectory(prefix="tfos-plot-") as tmp:
        _plot(spark, config, spec, rows, intervals, f"{tmp}/anomalies.png", anomaly)
        if os.path.exists(f"{tmp}/anomalies.png"):
            storage.upload_file(f"{tmp}/anomalies.png", model_dir.anomaly_plot)
        _score_plot(report, f"{tmp}/evaluation.png")
        storage.upload_file(f"{tmp}/evaluation.png", model_dir.evaluation_plot)
    for line in describe(report):
        log(line)
    log(f"plots: {model_dir.anomaly_plot}, {model_dir.evaluation_plot}")
    return report


def _read(spark: SparkSession, what: str, path: str) -> DataFrame:
    try:
        return spark.read.parquet(path)
    except AnalysisException as e:
        raise InputError(f"{what} {path!r}: {sources.explain(e)}") from None


def _split(storage: Storage, export_dir: str, config: Config) -> tuple[SplitConfig, int | None]:
    """The split of the dataset the model was trained on (its manifest asset); for a model
    exported without one, the config's."""
    path = contract.manifest_asset(export_dir)
    if storage.exists(path):
        return split_mod.from_manifest(Manifest.from_dict(json.loads(storage.read_text(path))).split)
    return config.prepare.split, None


def _baseline_scores(train: DataFrame, judged: DataFrame, spec: FeatureSpec, storage: Storage,
                     export_dir: str) -> tuple[DataFrame | None, dict[str, str]]:
    """The baselines of the `judged` windows (key, window_start, one column each), fitted on the
    `train` windows; and, for each baseline that cannot be had, why."""
    try:
        standardizer = baselines.Standardizer.of(spec, json.loads(storage.read_text(contract.stats_asset(export_dir))))
    except ValueError as e:
        return None, dict.fromkeys(baselines.NAMES, f"the model's statistics: {e}")
    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    profile = baselines.mean_profile(train, standardizer)
    fleet = baselines.fleet_fit(train, standardizer)
    why = {} if profile is not None else {baselines.PROFILE_DISTANCE: "no train window in the prepare sources"}
    return baselines.scores(train, judged, spec.key.name, WINDOW_START, standardizer, profile, fleet), why


def describe(report: Evaluation) -> list[str]:
    """The report as console lines: the scores side by side, the alerts, what was not computed."""
    w = report["windows"]
    lines = [f"windows judged: {w['judged']:,} of {w['assets']:,} assets, {w['anomalous']:,} overlap a true anomaly "
             "(the scored windows outside the model's train split)",
             f"  {'score':<52} " + " ".join(f"{title:>8}" for title in FIGURES.values())]
    for name in SCORES:
        figures = report["scores"][name]
        lines.append(f"  {TITLES[name]:<52} " + " ".join(f"{_figure(figures[f]):>8}" for f in FIGURES))
    r = report["readings"]
    lines.append(f"readings judged: {r['judged']:,} (covered by the windows, each scored by the highest of them), "
                 f"{r['anomalous']:,} in a true anomaly; VUS (TSB-AD's, buffer {vus.BUFFER} readings) per asset, the "
                 f"fleet's the mean over the {r['assets_with_both']:,} assets with both normal and anomalous readings")
    best = _best_baseline(report)
    if best is not None:
        assets = report["per_asset"]
        def model_auprc(asset: str) -> float:  # the model's AUPRC there; undefined (no anomaly) last
            own = assets[asset].get(MODEL)
            value = None if own is None else own["auprc"]
            return float("inf") if value is None else value

        weakest = sorted(assets, key=model_auprc)[:PRINTED_ASSETS]
        which = "" if len(weakest) == len(assets) else f", the {len(weakest)} of {len(assets):,} where the model does worst"
        lines.append(f"per asset{which}, ROC AUC / AUPRC / VUS-PR: the model and the best baseline on the fleet "
                     f"({TITLES[best]})")
        for asset in sorted(weakest):
            own, theirs = assets[asset].get(MODEL), assets[asset].get(best)
            lines.append(f"  {asset:<24} {_figures(own)}   {_figures(theirs)}")
    a = report["alerts"]
    lines.append(f"is_anomaly: {a['flagged']:,} windows flagged, precision {_figure(a['precision'])}, recall "
                 f"{_figure(a['recall'])}; incidents detected {a['incidents_detected']:,} of {a['incidents']:,} "
                 f"(event recall {_figure(a['event_recall'])}), {a['alerts']:,} alerts (runs of flagged windows), "
                 f"event precision {_figure(a['event_precision'])}")
    lines.append(f"point-adjusted F1 {_figure(a['point_adjusted_f1'])}, a random score flagging as many windows "
                 f"{_figure(a['point_adjusted_f1_random'])} (point adjustment flatters any score)")
    if w["baselines_fitted_on_the_fleet"]:
        lines.append(f"baselines: fitted on each asset's own train windows for {w['baselines_fitted_per_asset']:,} "
                     f"windows, on the fleet's for {w['baselines_fitted_on_the_fleet']:,} (assets without train windows)")
    lines += [f"not computed: {figure}: {reason}" for figure, reason in report["not_computed"].items()]
    return lines


def _best_baseline(report: Evaluation) -> str | None:
    known = [(figures["auprc"], name) for name, figures in report["scores"].items()
             if name != MODEL and figures["auprc"] is not None]
    return max(known)[1] if known else None


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _figures(ranking: Ranking | None) -> str:
    """An asset's ROC AUC / AUPRC / VUS-PR (n/a where its windows lack the score)."""
    shown: tuple[Figure, ...] = ("roc_auc", "auprc", "vus_pr")
    return " / ".join(_figure(None if ranking is None else ranking[f]) for f in shown)


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


def _plot(spark: SparkSession, config: Config, spec: FeatureSpec, rows: pd.DataFrame, intervals: pd.DataFrame,
          path: str, anomaly: dict) -> None:
    """For a few assets with incidents: a sensor's trace and the windows' error over the judged
    period, on one time axis, with the asset's threshold (`anomaly`: metrics.json's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    assert spec.key is not None  # a spec of sequence features has one (FeatureSpec.check)
    key, time = spec.key.name, spec.time.name
    assets = sorted(rows.loc[rows[ANOMALOUS].astype(bool), key].unique())[:PLOTTED_ASSETS] \
        or sorted(rows[key].unique())[:1]
    if not assets:
        return
    source = config.predict.input
    raw, _ = read_rows(spark, config if source is None else of_source(config, source), spec)
    first, last = rows[WINDOW_START].min(), rows[WINDOW_END].max()
    traces: pd.DataFrame = raw.where(F.col(key).isin(assets) & F.col(columns.CORRUPT).isNull()
                                     & F.col(time).between(first, last)) \
        .select(key, time, *(f.name for f in spec.sequences)).toPandas()
    fig, axes = plt.subplots(2 * len(assets), 1, figsize=(12, 3.2 * len(assets)), squeeze=False)
    for i, asset in enumerate(assets):
        mine = intervals[intervals[key] == asset]
        scored = rows[rows[key] == asset].sort_values(WINDOW_START)
        lo, hi = scored[WINDOW_START].min(), scored[WINDOW_END].max()
        sensor = str(mine[SENSOR].iloc[0]) if SENSOR in mine and len(mine) else spec.sequences[0].name
        trace = traces[(traces[key] == asset) & traces[time].between(lo, hi)].sort_values(time)
        top, bottom = axes[2 * i][0], axes[2 * i + 1][0]
        top.plot(trace[time], trace[sensor], lw=0.6)
        top.set_ylabel(sensor)
        top.set_title(f"{asset}: {sensor} and the reconstruction error of its windows (true anomalies shaded)")
        bottom.step(scored[WINDOW_START], scored[MODEL], where="post", lw=0.8)
        threshold = (anomaly.get("thresholds") or {}).get(str(asset), anomaly.get("threshold"))
        if threshold is not None:
            bottom.axhline(threshold, color="tab:red", ls="--", lw=0.8, label="is_anomaly threshold")
            bottom.legend(loc="upper right")
        bottom.set_yscale("log")
        bottom.set_ylabel("reconstruction error")
        for ax in (top, bottom):
            ax.set_xlim(lo, hi)  # one time axis: the judged period
            for _, interval in mine.iterrows():
                if interval[columns.ANOMALY_END] >= lo and interval[columns.ANOMALY_START] <= hi:
                    ax.axvspan(interval[columns.ANOMALY_START], interval[columns.ANOMALY_END], color="tab:orange",
                               alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _score_plot(report: Evaluation, path: str) -> None:
    """ROC AUC, AUPRC, VUS-ROC and VUS-PR of the model and of each baseline, side by side (n/a left empty)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(reversed(SCORES))  # the model on top
    fig, axes = plt.subplots(1, len(FIGURES), figsize=(20, 0.45 * len(names) + 1.2), sharey=True)
    for ax, figure in zip(axes, FIGURES):
        values = [report["scores"][n][figure] for n in names]
        colours = ["tab:blue" if n == MODEL else "tab:gray" for n in names]
        ax.barh(range(len(names)), [v or 0.0 for v in values], color=colours)
        for i, v in enumerate(values):
            ax.text((v or 0.0) + 0.01, i, _figure(v), va="center", fontsize=8)
        ax.set_xlim(0, 1.1)
        ax.set_title(FIGURES[figure])
    axes[0].set_yticks(range(len(names)), [TITLES[n] for n in names], fontsize=8)
    w = report["windows"]
    r = report["readings"]
    fig.suptitle(f"{w['judged']:,} windows judged ({w['anomalous']:,} anomalous), {w['assets']:,} assets; VUS on the "
                 f"{r['judged']:,} readings they cover ({r['anomalous']:,} anomalous), the mean over "
                 f"{r['assets_with_both']:,} assets", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
