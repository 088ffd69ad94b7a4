"""The figures `tfos evaluate` reports, on windows small enough to count by hand: AUPRC, window and
event precision and recall at the model's threshold, and the point-adjusted F1 beside a random
score's. No Spark."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tfos_jobs.contracts import serving as contract
from tfos_jobs.data import baselines
from tfos_jobs.data.columns import ANOMALY_END, ANOMALY_KIND, ANOMALY_START
from tfos_jobs.data.anomaly_figures import ANOMALOUS, KIND, MODEL, alerts, auprc, report, roc_auc
from tfos_jobs.jobs.serve.evaluate import _score_plot
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START

T0 = pd.Timestamp("2026-01-01")


def test_auprc_is_the_average_precision_at_each_anomalous_window():
    labels = np.array([1, 0, 1, 0])
    assert auprc(labels, np.array([0.9, 0.8, 0.7, 0.1])) == pytest.approx((1 / 1 + 2 / 3) / 2, abs=1e-6)
    assert auprc(labels, np.array([4.0, 1.0, 3.0, 2.0])) == 1.0
    assert auprc(labels, np.zeros(4)) == 0.5  # all tied: the share of anomalous windows
    assert auprc(np.zeros(4), np.arange(4.0)) is None and roc_auc(np.zeros(4), np.arange(4.0)) is None


def windows(flagged: set[int], anomalous: set[int], n: int = 10, asset: str = "a") -> pd.DataFrame:
    """`n` windows of 10 s, one every 10 s."""
    starts = [T0 + pd.Timedelta(seconds=10 * i) for i in range(n)]
    return pd.DataFrame({"asset": asset, WINDOW_START: starts, WINDOW_END: [s + pd.Timedelta(seconds=9) for s in starts],
                         contract.IS_ANOMALY: [i in flagged for i in range(n)],
                         ANOMALOUS: [i in anomalous for i in range(n)],
                         baselines.RANDOM: np.linspace(0.05, 0.95, n)[::-1]})


def incidents(*spans: tuple[int, int], asset: str = "a") -> pd.DataFrame:
    """Intervals covering windows first..last."""
    return pd.DataFrame({"asset": asset, ANOMALY_START: [T0 + pd.Timedelta(seconds=10 * a) for a, _ in spans],
                         ANOMALY_END: [T0 + pd.Timedelta(seconds=10 * b + 9) for _, b in spans],
                         ANOMALY_KIND: "incident"})


def test_alerts_count_windows_incidents_and_runs_of_flagged_windows():
    rows = windows(flagged={4, 7}, anomalous={3, 4, 5, 8})
    a = alerts(rows, incidents((3, 5), (8, 8)), "asset", threshold=1.5)
    assert a["threshold"] == 1.5 and a["flagged"] == 2
    assert (a["precision"], a["recall"]) == (0.5, 0.25)
    assert (a["incidents"], a["incidents_detected"], a["event_recall"]) == (2, 1, 0.5)  # the first one only
    assert (a["alerts"], a["event_precision"]) == (2, 0.5)  # window 7 is a false alarm
    # point-adjusted: window 4 detects the whole first incident (3, 4, 5): 3 of 4 flagged right, 3 of 4 found
    assert a["point_adjusted_f1"] == 0.75
    # the random score flags its two highest, windows 0 and 1: nothing right
    assert a["point_adjusted_f1_random"] == 0.0


def test_an_incident_outside_the_judged_windows_is_not_counted_and_nothing_flagged_is_said():
    rows = windows(flagged=set(), anomalous={2})
    a = alerts(rows, pd.concat([incidents((2, 2)), incidents((50, 60)), incidents((2, 2), asset="b")]), "asset", None)
    assert (a["incidents"], a["incidents_detected"], a["event_recall"]) == (1, 0, 0.0)
    assert a["precision"] is None and a["event_precision"] is None and a["point_adjusted_f1_random"] is None


def test_the_report_ranks_every_score_per_fleet_and_per_asset(tmp_path):
    rows = pd.concat([windows({4}, {3, 4}), windows({1}, {1}, asset="b")], ignore_index=True)
    rows[MODEL] = rows[ANOMALOUS].astype(float) + np.linspace(0, 0.1, len(rows))  # ranks every anomaly first
    for name in baselines.NAMES[:-1]:
        rows[name] = np.linspace(1, 0, len(rows))
    rows[KIND] = np.where(rows[ANOMALOUS], "incident", None)
    rows[baselines.FIT] = "asset"
    figures = report(rows, pd.concat([incidents((3, 4)), incidents((1, 1), asset="b")]), "asset", {}, 0.5)
    assert figures["scores"][MODEL] == {"roc_auc": 1.0, "auprc": 1.0}
    assert figures["per_asset"]["b"][MODEL] == {"roc_auc": 1.0, "auprc": 1.0}
    assert figures["windows"] == {"judged": 20, "anomalous": 3, "assets": 2, "baselines_fitted_per_asset": 20,
                                 "baselines_fitted_on_the_fleet": 0}
    assert figures["recall_by_kind"] == {"incident": round(2 / 3, 4)}
    assert figures["not_computed"] == {}
    _score_plot(figures, str(tmp_path / "evaluation.png"))  # the figures as bars, beside each other
    assert (tmp_path / "evaluation.png").stat().st_size > 10_000
