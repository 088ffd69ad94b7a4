"""The figures `tfos evaluate` reports on judged windows, from plain pandas frames: one row per window with its key,
bounds, `anomalous`, `kind`, the model's score and `is_anomaly`, and each baseline's score (`data.baselines`). The
ranking figures per score for the fleet and per asset: ROC AUC and AUPRC on windows, and VUS-PR and VUS-ROC on
readings (`data.vus`, TSB-AD's definitions; each reading scored by the highest of the windows covering it,
`data.reading_scores`). VUS is a figure of one series: per asset on its readings in time order, and for the fleet the
mean over the assets whose readings are not all normal or all anomalous, as TSB-AD reports a multi-entity dataset
(each entity a series of its own, the figures averaged over series) rather than on the assets' series concatenated.
Then the alerts at the model's threshold by window, by incident, by run of flagged windows, and point-adjusted beside a
random score's. A figure the windows do not define is None, with the reason in `not_computed`."""
from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np
import pandas as pd

from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.metrics import Alerts, Evaluation, Ranking
from tfos_jobs.data import baselines, columns, reading_scores, vus
from tfos_jobs.data.vus import Volumes
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START

ANOMALOUS = "anomalous"  # a window overlaps an interval of the truth table
KIND = columns.ANOMALY_KIND
MODEL = contract.RECONSTRUCTION_ERROR
SCORES = (MODEL, *baselines.NAMES)  # report order: the model's, then the baselines'
TITLES = {MODEL: "autoencoder (reconstruction_error)", **baselines.TITLES}


def report(rows: pd.DataFrame, intervals: pd.DataFrame, key: str, not_computed: dict[str, str],
           threshold: float | None, *, step_seconds: int) -> Evaluation:
    """Every figure the judged windows define; `not_computed` says, for each one they do not, why.
    `threshold`: the model's, where `is_anomaly` flags a window (metrics.json); `step_seconds`: the
    time between two readings, which places each reading a window covers (`data.reading_scores`)."""
    why = dict(not_computed)
    assets = {str(asset): (mine, intervals[intervals[key] == asset]) for asset, mine in rows.groupby(key, sort=True)}
    on_readings = {name: {asset: _on_readings(mine, truth, name, step_seconds) for asset, (mine, truth) in assets.items()}
                   for name in SCORES}
    fleet: dict[str, Ranking] = {}
    for name in SCORES:
        known = rows[rows[name].notna()]
        fleet[name] = _ranking(known[ANOMALOUS].to_numpy(), known[name].to_numpy(dtype=np.float64),
                               _mean(on_readings[name].values()))
        if fleet[name]["roc_auc"] is None and name not in not_computed:
            why.setdefault(f"{name} ROC AUC and AUPRC", _undefined(known))
        if fleet[name]["vus_pr"] is None and name not in not_computed:
            why.setdefault(f"{name} VUS-PR and VUS-ROC", _no_volume(list(on_readings[name].values())))
    per_asset = {asset: {name: _ranking(mine[ANOMALOUS].to_numpy(), mine[name].to_numpy(dtype=np.float64),
                                        on_readings[name][asset].volumes)
                         for name in SCORES if mine[name].notna().all()} for asset, (mine, _) in assets.items()}
    flagged = alerts(rows, intervals, key, threshold)
    if flagged["precision"] is None:
        why["is_anomaly precision"] = f"is_anomaly flagged none of the {len(rows):,} judged windows"
    if flagged["event_recall"] is None:
        why["event recall"] = "no incident of the truth table overlaps a judged window"
    fits = rows[baselines.FIT].value_counts(dropna=True) if baselines.FIT in rows else pd.Series(dtype=int)
    anomalous = rows[ANOMALOUS].astype(bool)
    readings = [_on_readings(mine, truth, None, step_seconds) for mine, truth in assets.values()]
    return Evaluation(
        windows={"judged": len(rows), "anomalous": int(anomalous.sum()), "assets": int(rows[key].nunique()),
                 "baselines_fitted_per_asset": int(fits.get("asset", 0)),
                 "baselines_fitted_on_the_fleet": int(fits.get("fleet", 0))},
        readings={"judged": sum(r.readings for r in readings), "anomalous": sum(r.anomalous for r in readings),
                  "assets_with_both": sum(0 < r.anomalous < r.readings for r in readings)},
        scores=fleet, per_asset=per_asset, alerts=flagged,
        recall_by_kind={str(kind): round(float(g[contract.IS_ANOMALY].mean()), 4)
                        for kind, g in rows[anomalous].groupby(KIND)},
        not_computed=why)


class OnReadings(NamedTuple):
    """One score on one asset's readings: VUS-ROC and VUS-PR (None: all normal or all anomalous), how many readings
    its windows cover, how many of them are anomalous."""

    volumes: Volumes | None
    readings: int
    anomalous: int


def _on_readings(windows: pd.DataFrame, truth: pd.DataFrame, name: str | None, step_seconds: int) -> OnReadings:
    """The score `name` of one asset's windows on the readings they cover (windows without it left out), against
    the asset's intervals `truth`; `name` None: the readings every judged window covers, counted only."""
    known = windows if name is None else windows[windows[name].notna()]
    values = np.zeros(len(known)) if name is None else known[name].to_numpy(dtype=np.float64)
    times, scores = reading_scores.from_windows(known[WINDOW_START].to_numpy(), known[WINDOW_END].to_numpy(), values,
                                                step_seconds)
    labels = reading_scores.in_intervals(times, pd.to_datetime(truth[columns.ANOMALY_START]).to_numpy(),
                                         pd.to_datetime(truth[columns.ANOMALY_END]).to_numpy())
    ranked = name is not None and len(times) > 0
    return OnReadings(vus.volumes(labels, scores) if ranked else None, len(times), int(labels.sum()))


def _mean(assets: Iterable[OnReadings]) -> Volumes | None:
    """The fleet's VUS: the mean of its assets' (those that have one)."""
    defined = [a.volumes for a in assets if a.volumes is not None]
    if not defined:
        return None
    return Volumes(roc=float(np.mean([v.roc for v in defined])), pr=float(np.mean([v.pr for v in defined])))


def _ranking(labels: np.ndarray, scores: np.ndarray, volumes: Volumes | None) -> Ranking:
    return Ranking(roc_auc=roc_auc(labels, scores), auprc=auprc(labels, scores),
                   vus_pr=None if volumes is None else round(volumes.pr, 6),
                   vus_roc=None if volumes is None else round(volumes.roc, 6))


def _undefined(windows: pd.DataFrame) -> str:
    if windows.empty:
        return "no judged window has this score"
    anomalous = int(windows[ANOMALOUS].sum())
    if anomalous == 0:
        return f"none of the {len(windows):,} judged windows overlaps a true anomaly"
    return f"every one of the {len(windows):,} judged windows overlaps a true anomaly"


def _no_volume(assets: list[OnReadings]) -> str:
    readings, anomalous = sum(a.readings for a in assets), sum(a.anomalous for a in assets)
    if readings == 0:
        return "no judged window has this score"
    if anomalous == 0:
        return f"none of the {readings:,} judged readings lies in a true anomaly"
    if anomalous == readings:
        return f"every one of the {readings:,} judged readings lies in a true anomaly"
    return f"no asset has both normal and anomalous judged readings ({anomalous:,} of {readings:,} are anomalous)"


def alerts(rows: pd.DataFrame, intervals: pd.DataFrame, key: str, threshold: float | None) -> Alerts:
    """The model's `is_anomaly` as alerts: by window, by incident, by run of flagged windows,
    and point-adjusted (beside a random score flagging as many windows)."""
    flagged, actual = rows[contract.IS_ANOMALY].astype(bool).to_numpy(), rows[ANOMALOUS].astype(bool).to_numpy()
    hits = int((flagged & actual).sum())
    detected, incidents, true_runs, runs = 0, 0, 0, 0
    adjusted_model, adjusted_random = np.zeros(len(rows), bool), np.zeros(len(rows), bool)
    random_flags = np.zeros(len(rows), bool)
    if flagged.any():
        top = np.argsort(-rows[baselines.RANDOM].fillna(0).to_numpy(), kind="mergesort")[:int(flagged.sum())]
        random_flags[top] = True
    for asset, mine in rows.groupby(key, sort=False):
        order = mine.sort_values(WINDOW_START).index.to_numpy()
        index = rows.index.get_indexer(order)
        starts, ends = mine.loc[order, WINDOW_START].to_numpy(), mine.loc[order, WINDOW_END].to_numpy()
        f, a = flagged[index], actual[index]
        for _, incident in intervals[intervals[key] == asset].iterrows():
            meets = (starts <= np.datetime64(incident[columns.ANOMALY_END])) \
                & (ends >= np.datetime64(incident[columns.ANOMALY_START]))
            if meets.any():
                incidents += 1
                detected += int(f[meets].any())
        for run in _runs(f):
            runs += 1
            true_runs += int(a[run].any())
        for segment in _runs(a):
            adjusted_model[index[segment]] = f[segment].any()
            adjusted_random[index[segment]] = random_flags[index][segment].any()
    adjusted_model |= flagged
    adjusted_random |= random_flags
    return Alerts(
        threshold=threshold,
        flagged=int(flagged.sum()),
        precision=round(hits / int(flagged.sum()), 4) if flagged.any() else None,
        recall=round(hits / int(actual.sum()), 4) if actual.any() else None,
        incidents=incidents, incidents_detected=detected,
        event_recall=round(detected / incidents, 4) if incidents else None,
        alerts=runs, event_precision=round(true_runs / runs, 4) if runs else None,
        point_adjusted_f1=_f1(adjusted_model, actual),
        point_adjusted_f1_random=_f1(adjusted_random, actual) if flagged.any() else None,
    )


def _runs(mask: np.ndarray) -> list[slice]:
    """The maximal runs of True in `mask`, as slices."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [slice(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def _f1(predicted: np.ndarray, actual: np.ndarray) -> float | None:
    tp = int((predicted & actual).sum())
    if not predicted.any() or not actual.any():
        return None
    precision, recall = tp / int(predicted.sum()), tp / int(actual.sum())
    return round(2 * precision * recall / (precision + recall), 4) if tp else 0.0


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


def auprc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the precision-recall curve as average precision: the precision at each
    distinct score, weighted by the recall it adds (tied windows enter together)."""
    labels = labels.astype(bool)
    positives = int(labels.sum())
    if positives == 0 or positives == len(labels):
        return None
    order = np.argsort(-scores, kind="mergesort")
    hits, ranked = np.cumsum(labels[order]), scores[order]
    last_of_tie = np.concatenate([ranked[1:] != ranked[:-1], [True]])
    precision = hits[last_of_tie] / (np.flatnonzero(last_of_tie) + 1)
    recall_added = np.diff(np.concatenate([[0], hits[last_of_tie]])) / positives
    return round(float((precision * recall_added).sum()), 6)
