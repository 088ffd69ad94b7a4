"""VUS-ROC and VUS-PR, the volumes under range-aware ROC and PR surfaces, computed as TSB-AD (Liu & Paparrizos,
NeurIPS 2024; `TSB_AD.evaluation.metrics.get_metrics`, its `RangeAUC_volume_opt`) computes them, on one series of
readings: a 0/1 label and a score per reading, in time order.

Why: point-wise ROC AUC and AUPRC count a score that rises a few readings before or after a labelled range as a miss,
although labels are rarely exact at a range's edges. VUS gives the readings within a buffer of each range a label that
fades with the distance (sqrt(1 - d / w)), asks each range to be met at all (the share of ranges met scales the true
positive rate), and averages the range-aware ROC and PR areas over every buffer width w from 0 to `buffer` readings:
threshold-free, and tolerant of small misalignments at range edges. TSB-AD recommends VUS-PR as the primary figure.

Parameters as `get_metrics` takes them by default: `slidingWindow` = 100 readings (`BUFFER`; TSB-AD's own benchmark
runs pass instead each series' period as `find_length_rank` estimates it from its first channel), `version` = "opt"
(which "opt_mem" equals), `thre` = 250 thresholds: the scores at 250 evenly spaced ranks, each flagging the readings
scoring at least as much.

TSB-AD loops in Python over buffer widths, thresholds and ranges; here the same sums come from sorting once: at each
threshold, the true positives are the anomalous readings flagged plus the faded labels of the flagged readings within a
buffer (cumulative sums in score order), and a range's buffered extent is met when its highest score reaches the
threshold (cumulative maxima outwards from each range).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

BUFFER = 100  # readings: get_metrics' slidingWindow
THRESHOLDS = 250  # get_metrics' thre
CHUNK = 4_000_000  # faded labels (buffer widths x readings near a range) held at once


class Volumes(NamedTuple):
    roc: float  # VUS-ROC
    pr: float  # VUS-PR


def volumes(labels: np.ndarray, scores: np.ndarray, *, buffer: int = BUFFER,
            thresholds: int = THRESHOLDS) -> Volumes | None:
    """VUS-ROC and VUS-PR of `scores` against `labels` (truthy: the reading is anomalous); None when the readings
    are all normal or all anomalous, where TSB-AD's code has no range or nothing outside one."""
    anomalous = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    if anomalous.shape != scores.shape or anomalous.ndim != 1:
        raise ValueError(f"labels and scores must be one series of equal length, got {anomalous.shape} and "
                         f"{scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores must be numbers: a reading without a score is not judged")
    if buffer < 0 or thresholds < 1:
        raise ValueError(f"buffer must be >= 0 and thresholds >= 1, got {buffer} and {thresholds}")
    n = len(scores)
    if not anomalous.any() or anomalous.all():
        return None
    starts, ends = ranges(anomalous)
    cut = (-np.sort(-scores))[np.linspace(0, n - 1, thresholds).astype(int)]  # TSB-AD's thresholds, highest first
    flagged = _at_least(np.sort(scores), cut).astype(np.float64)
    hits = _at_least(np.sort(scores[anomalous]), cut)
    widths = np.arange(buffer + 1)
    faded = _faded_flagged(anomalous, scores, starts, ends, widths, cut)  # (widths, thresholds)
    met = _share_met(scores, starts, ends, buffer // 2, cut)[widths // 2]
    positives = float(anomalous.sum())
    true = hits + faded
    expected = positives + faded / 2  # TSB-AD's P_new: the anomalous readings and half the buffers' labels flagged
    tpr = np.minimum(true / expected, 1.0) * met
    fpr = (flagged - true) / (n - expected)
    precision = true / flagged
    edge = np.zeros((len(widths), 1))
    tpr, fpr = np.hstack([edge, tpr, edge + 1]), np.hstack([edge, fpr, edge + 1])  # from (0, 0) to (1, 1)
    roc = (np.diff(fpr, axis=1) * (tpr[:, 1:] + tpr[:, :-1]) / 2).sum(axis=1)
    pr = (np.diff(tpr[:, :-1], axis=1) * precision).sum(axis=1)
    return Volumes(roc=float(roc.mean()), pr=float(pr.mean()))


def ranges(anomalous: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and last index (inclusive) of each run of anomalous readings, in order."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], anomalous.astype(np.int8), [0]])))
    return edges[::2], edges[1::2] - 1


def _at_least(ascending: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """How many of the sorted values are at least each of `cut`."""
    return len(ascending) - np.searchsorted(ascending, cut, side="left")


def _faded_flagged(anomalous: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   widths: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """For each buffer width and threshold, the sum of the faded labels of the normal readings flagged: a reading
    d steps after a range's end or before its start, d <= w // 2, gets sqrt(1 - d / w) from that range, summed over
    the ranges near it in their order and capped at 1, as TSB-AD's `sequencing` does."""
    reach = int(widths[-1]) // 2
    out = np.zeros((len(widths), len(cut)))
    if reach == 0:
        return out
    steps = np.arange(1, reach + 1)
    near = np.hstack([ends[:, None] + steps, starts[:, None] - steps]).ravel()  # per range: after it, then before
    distance = np.tile(np.concatenate([steps, steps]), len(starts))
    inside = (near >= 0) & (near < len(scores))
    near, distance = near[inside], distance[inside]
    normal = ~anomalous[near]
    near, distance = near[normal], distance[normal]
    if len(near) == 0:
        return out
    grouped = np.argsort(near, kind="stable")  # by reading, each reading's ranges in their order
    near, distance = near[grouped], distance[grouped]
    readings, first_of = np.unique(near, return_index=True)
    order = np.argsort(-scores[readings], kind="stable")
    counts = _at_least(np.sort(scores[readings]), cut)  # the readings near a range flagged at each threshold
    w = widths[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):  # w = 0 and 1 reach no reading
        fades = np.where(steps <= w // 2, np.sqrt(1 - steps / w), 0.0)  # (widths, reach): by distance - 1
    step = max(1, CHUNK // len(near))
    for first in range(0, len(widths), step):
        label = np.add.reduceat(fades[first:first + step][:, distance - 1], first_of, axis=1)
        running = np.hstack([np.zeros((len(label), 1)), np.cumsum(np.minimum(label, 1.0)[:, order], axis=1)])
        out[first:first + step] = running[:, counts]
    return out


def _share_met(scores: np.ndarray, starts: np.ndarray, ends: np.ndarray, reach: int,
               cut: np.ndarray) -> np.ndarray:
    """For each half-width h = 0..reach and threshold, the share of extents met: ranges widened by h readings on
    each side (within the series), merged where they meet (TSB-AD's `new_sequence`), and met where a reading scores
    at least the threshold."""
    n = len(scores)
    padded = np.append(scores, -np.inf)
    inner = np.maximum.reduceat(padded, np.column_stack([starts, ends + 1]).ravel())[::2]  # each range's highest
    steps = np.arange(1, reach + 1)
    after, before = ends[:, None] + steps, starts[:, None] - steps
    outward = np.maximum(np.where(after < n, padded[np.minimum(after, n)], -np.inf),
                         np.where(before >= 0, padded[np.maximum(before, 0)], -np.inf))
    highest = np.maximum.accumulate(np.hstack([inner[:, None], outward]), axis=1)  # (ranges, reach + 1)
    gaps = starts[1:] - ends[:-1]  # from one range's last reading to the next one's first
    out = np.empty((reach + 1, len(cut)))
    for h in range(reach + 1):
        first = np.flatnonzero(np.concatenate([[True], gaps > 2 * h]))  # the first range of each extent
        extents = np.sort(np.maximum.reduceat(highest[:, h], first))
        out[h] = _at_least(extents, cut) / len(first)
    return out
