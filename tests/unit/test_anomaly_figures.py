"""The figures `tfos evaluate` reports, on windows small enough to count by hand: AUPRC, VUS per asset
and for the fleet (on the readings the windows cover), window and event precision and recall at the
model's threshold, and the point-adjusted F1 beside a random score's. No Spark."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tfos_jobs.contracts import serving as contract
from tfos_jobs.data import baselines
from tfos_jobs.data.columns import ANOMALY_END, ANOMALY_KIND, ANOMALY_START
from tfos_jobs.data import vus
from tfos_jobs.data.anomaly_figures import ANOMALOUS, KIND, MODEL, alerts, auprc, report, roc_auc
from tfos_jobs.jobs.serve.evaluate import _score_plot, describe
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


def scored(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with the model's score ranking every anomalous window first, and the baselines'."""
    rows[MODEL] = rows[ANOMALOUS].astype(float) + np.linspace(0, 0.1, len(rows))
    for name in baselines.NAMES[:-1]:
        rows[name] = np.linspace(1, 0, len(rows))
    rows[KIND] = np.where(rows[ANOMALOUS], "incident", None)
    rows[baselines.FIT] = "asset"
    return rows


def test_the_report_ranks_every_score_per_fleet_and_per_asset(tmp_path):
    rows = scored(pd.concat([windows({4}, {3, 4}), windows({1}, {1}, asset="b")], ignore_index=True))
    rows.loc[15, MODEL] = 2.0  # b's window 5, normal, scores highest of all
    figures = report(rows, pd.concat([incidents((3, 4)), incidents((1, 1), asset="b")]), "asset", {}, 0.5,
                     step_seconds=1)
    # each window is 10 readings of 1 s: a reading takes its window's score; a's readings 30-49 s are anomalous
    a = vus.volumes(np.repeat(np.isin(np.arange(10), [3, 4]), 10), np.repeat(rows[MODEL].to_numpy()[:10], 10))
    b = vus.volumes(np.repeat(np.arange(10) == 1, 10), np.repeat(rows[MODEL].to_numpy()[10:], 10))
    assert a is not None and b is not None and a == (1.0, 1.0) and 0 < b.pr < 0.9 and 0 < b.roc < 1
    assert figures["per_asset"]["a"][MODEL] == {"roc_auc": 1.0, "auprc": 1.0, "vus_pr": 1.0, "vus_roc": 1.0}
    assert figures["per_asset"]["b"][MODEL] == {"roc_auc": round(8 / 9, 6), "auprc": 0.5, "vus_pr": round(b.pr, 6),
                                                "vus_roc": round(b.roc, 6)}
    # on the fleet's windows, one normal window first, then the three anomalous ones; the fleet's VUS is the mean of
    # its assets' (TSB-AD's figure for a dataset of many series)
    assert figures["scores"][MODEL] == {"roc_auc": round(16 / 17, 6), "auprc": round((1 / 2 + 2 / 3 + 3 / 4) / 3, 6),
                                        "vus_pr": round((1 + b.pr) / 2, 6), "vus_roc": round((1 + b.roc) / 2, 6)}
    assert figures["windows"] == {"judged": 20, "anomalous": 3, "assets": 2, "baselines_fitted_per_asset": 20,
                                 "baselines_fitted_on_the_fleet": 0}
    assert figures["readings"] == {"judged": 200, "anomalous": 30, "assets_with_both": 2}
    assert figures["recall_by_kind"] == {"incident": round(2 / 3, 4)}
    assert figures["not_computed"] == {}
    lines = describe(figures)
    assert lines[1].split() == ["score", "ROC", "AUC", "AUPRC", "VUS-ROC", "VUS-PR"]
    assert lines[2].split()[-4:] == [f"{16 / 17:.4f}", f"{(1 / 2 + 2 / 3 + 3 / 4) / 3:.4f}", f"{(1 + b.roc) / 2:.4f}",
                                     f"{(1 + b.pr) / 2:.4f}"]
    assert any(line.startswith("readings judged: 200 (") and "the mean over the 2 assets" in line for line in lines)
    assert f"  b                        0.8889 / 0.5000 / {b.pr:.4f}" in [line[:51] for line in lines]
    _score_plot(figures, str(tmp_path / "evaluation.png"))  # the figures as bars, beside each other
    assert (tmp_path / "evaluation.png").stat().st_size > 10_000


def test_the_fleets_vus_averages_the_assets_that_define_it_on_the_windows_with_the_score():
    """An asset without an anomalous reading has no VUS and is left out of the fleet's mean; a window without a
    baseline's score leaves its readings out of that baseline's figures, and the asset out of its per-asset ones."""
    rows = scored(pd.concat([windows(set(), {3, 4}), windows(set(), set(), asset="quiet")], ignore_index=True))
    rows.loc[0, baselines.ZSCORE] = np.nan  # a's first window: readings 0-9 s, not judged for the z-score
    figures = report(rows, incidents((3, 4)), "asset", {}, None, step_seconds=1)
    assert figures["readings"] == {"judged": 200, "anomalous": 20, "assets_with_both": 1}
    assert figures["per_asset"]["quiet"][MODEL]["vus_pr"] is None
    assert figures["scores"][MODEL]["vus_pr"] == figures["per_asset"]["a"][MODEL]["vus_pr"]
    assert baselines.ZSCORE not in figures["per_asset"]["a"] and baselines.ZSCORE in figures["per_asset"]["quiet"]
    expected = vus.volumes(np.repeat(np.isin(np.arange(1, 10), [3, 4]), 10), np.repeat(rows[baselines.ZSCORE][1:10], 10))
    assert expected is not None
    assert figures["scores"][baselines.ZSCORE]["vus_pr"] == round(expected.pr, 6)


def test_vus_without_an_anomalous_reading_is_none_with_the_reason():
    rows = scored(windows(set(), set()))
    figures = report(rows, incidents((50, 60)), "asset", {baselines.PROFILE_DISTANCE: "no train window"}, None,
                     step_seconds=1)
    assert figures["scores"][MODEL] == {"roc_auc": None, "auprc": None, "vus_pr": None, "vus_roc": None}
    assert figures["not_computed"][f"{MODEL} VUS-PR and VUS-ROC"] == "none of the 100 judged readings lies in a true " \
                                                                    "anomaly"
    assert figures["not_computed"][baselines.PROFILE_DISTANCE] == "no train window"  # the reason given stays alone
    assert f"{baselines.PROFILE_DISTANCE} VUS-PR and VUS-ROC" not in figures["not_computed"]
    assert "not computed: reconstruction_error VUS-PR and VUS-ROC: none of the 100 judged readings lies in a true " \
           "anomaly" in describe(figures)
