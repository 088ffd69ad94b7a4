"""VUS-PR and VUS-ROC as TSB-AD computes them: the `tsb-ad` package's own `get_metrics` (installed without its
model dependencies, `make setup`) on series a detector's scores would give, against `data.vus`. No Spark."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from TSB_AD.evaluation.metrics import get_metrics

from tfos_jobs.data import vus

TOLERANCE = 1e-6


def realistic() -> tuple[np.ndarray, np.ndarray]:
    """A periodic sensor with noise and four incidents of different shapes and lengths (a spike, a level shift, a
    doubled amplitude, a flat line), scored by the smoothed distance from the normal pattern, a few readings late."""
    rng = np.random.default_rng(11)
    n = 1500
    t = np.arange(n)
    normal = np.sin(2 * np.pi * t / 48)
    signal = normal + rng.normal(0, 0.4, n)
    labels = np.zeros(n, dtype=int)
    for start, length, change in ((130, 3, "spike"), (420, 60, "shift"), (800, 120, "amplitude"), (1210, 35, "flat")):
        span = slice(start, start + length)
        labels[span] = 1
        if change == "spike":
            signal[span] += 1.5
        elif change == "shift":
            signal[span] += 0.4
        elif change == "amplitude":
            signal[span] = 1.6 * normal[span] + rng.normal(0, 0.4, length)
        else:
            signal[span] = signal[start]
    distance = np.abs(signal - normal)
    score = np.convolve(distance, np.ones(9) / 9, mode="full")[:n]  # a trailing mean: late at each range's start
    return labels, score


def at_the_edges() -> tuple[np.ndarray, np.ndarray]:
    """Anomalous ranges at the very first and the very last readings (and one between)."""
    rng = np.random.default_rng(5)
    labels = np.zeros(700, dtype=int)
    labels[:25], labels[340:350], labels[-40:] = 1, 1, 1
    return labels, rng.gamma(2.0, 1.0, 700) + 1.5 * labels * rng.random(700)


def tied() -> tuple[np.ndarray, np.ndarray]:
    """Scores of one decimal, a long constant stretch and an anomalous range tied with normal readings."""
    rng = np.random.default_rng(3)
    labels = np.zeros(900, dtype=int)
    labels[100:140], labels[500:505], labels[610:700] = 1, 1, 1
    score = np.round(rng.random(900) * 0.6 + 0.5 * labels, 1)
    score[300:450] = 0.3
    score[610:700] = 0.3  # this range scores exactly as the constant stretch does
    return labels, score


def short() -> tuple[np.ndarray, np.ndarray]:
    """Fewer readings than the buffer and than the thresholds (the ranks TSB-AD picks repeat)."""
    labels = np.zeros(60, dtype=int)
    labels[10:13], labels[40:41] = 1, 1
    return labels, np.round(np.linspace(0, 1, 60) ** 2 + labels * 0.2, 2)


SERIES = {"realistic": realistic, "at the edges": at_the_edges, "tied": tied, "short": short}


def theirs(labels: np.ndarray, score: np.ndarray, **options: object) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's, on the threshold-dependent figures get_metrics also computes
        figures = get_metrics(score, labels, **options)
    return float(figures["VUS-ROC"]), float(figures["VUS-PR"])


@pytest.mark.parametrize("name", SERIES)
def test_vus_equals_tsb_ads_get_metrics_with_its_defaults(name):
    labels, score = SERIES[name]()
    assert 0 < labels.sum() < len(labels)
    ours = vus.volumes(labels, score)
    assert ours is not None
    roc, pr = theirs(labels, score)
    assert ours.roc == pytest.approx(roc, abs=TOLERANCE) and ours.pr == pytest.approx(pr, abs=TOLERANCE)
    assert 0.0 < ours.pr < 1.0 and 0.0 < ours.roc < 1.0


def test_vus_equals_tsb_ads_with_another_buffer_and_its_memory_saving_version():
    labels, score = realistic()
    ours = vus.volumes(labels, score, buffer=32)
    assert ours is not None
    assert (ours.roc, ours.pr) == pytest.approx(theirs(labels, score, slidingWindow=32), abs=TOLERANCE)
    labels, score = short()
    assert vus.volumes(labels, score) == pytest.approx(theirs(labels, score, version="opt_mem"), abs=TOLERANCE)


def test_the_buffer_rewards_a_score_that_is_late_at_a_range_point_wise_figures_miss():
    """A detector that fires just after each range beats one that fires at random readings, in VUS; point-wise both
    miss every anomalous reading."""
    labels = np.zeros(1000, dtype=int)
    labels[200:210], labels[600:610] = 1, 1
    late, elsewhere = np.zeros(1000), np.zeros(1000)
    late[212:216], late[612:616] = 1.0, 1.0
    elsewhere[[50, 51, 400, 401, 800, 801, 900, 950]] = 1.0
    on_time, off_time = vus.volumes(labels, late), vus.volumes(labels, elsewhere)
    assert on_time is not None and off_time is not None
    assert on_time.pr > 2 * off_time.pr and on_time.roc > off_time.roc


def test_vus_is_undefined_without_an_anomalous_or_a_normal_reading_and_refuses_a_missing_score():
    assert vus.volumes(np.zeros(50), np.arange(50.0)) is None
    assert vus.volumes(np.ones(50), np.arange(50.0)) is None
    with pytest.raises(ValueError, match="a reading without a score is not judged"):
        vus.volumes(np.array([0, 1, 0]), np.array([0.1, np.nan, 0.2]))
    with pytest.raises(ValueError, match="one series of equal length"):
        vus.volumes(np.array([0, 1, 0]), np.array([0.1, 0.2]))


def test_ranges_are_the_runs_of_anomalous_readings():
    starts, ends = vus.ranges(np.array([1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=bool))
    assert starts.tolist() == [0, 4, 6] and ends.tolist() == [1, 4, 8]
