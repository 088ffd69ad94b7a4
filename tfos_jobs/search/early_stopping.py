"""The median stopping rule, as in Google Vizier and Optuna's MedianPruner.

A trial stops after epoch e when the best value it has reached so far is worse than the
median of the other trials' values at epoch e; a trial not yet at epoch e counts with its
latest value. Without that, a trial that runs ahead of the others (it started in a Python
worker that had TensorFlow loaded already, say) would never be judged at all; the latest
value of a trial still behind is if anything below what it will reach, so the rule only
errs towards letting a trial go on. Trials report per-epoch metrics into the
shared sweep dir (`trial-*/progress.jsonl`), so the rule needs no coordinator.
"""
from __future__ import annotations

import math
import statistics
from typing import Iterable

from tfos_jobs.progress_log import EPOCH


def should_stop(own: list[float], others: Iterable[list[float]], goal: str, warmup_epochs: int,
                min_trials: int) -> bool:
    """`own` and each of `others`: one metric value per finished epoch, in order. A trial
    whose latest value is NaN has diverged and stops; others' NaNs count as the worst value."""
    if own and not math.isfinite(own[-1]):
        return True
    worst = -math.inf if goal == "maximize" else math.inf
    fix = lambda v: v if math.isfinite(v) else worst
    own = [fix(v) for v in own]
    epoch = len(own)
    if epoch == 0 or epoch <= warmup_epochs:
        return False
    at_epoch = [fix(h[min(epoch, len(h)) - 1]) for h in others if h]
    if len(at_epoch) < min_trials:
        return False
    median = statistics.median(at_epoch)
    if goal == "maximize":
        return max(own) < median
    return min(own) > median


def metric_history(lines: list[dict], metric: str) -> list[float]:
    """Per-epoch values of `metric` from progress lines; a resumed run's repeated epochs count once."""
    by_epoch: dict[int, float] = {}
    for line in lines:
        if metric in line:
            by_epoch[int(line[EPOCH])] = float(line[metric])
    return [by_epoch[e] for e in sorted(by_epoch)]
