"""How sensor windows are standardised, from the dataset's statistics: one definition for the
model's in-graph layer (`model.sequence`) and the baselines it is compared with (`data.baselines`)."""
from __future__ import annotations

from typing import Any

from tfos_jobs.features.spec import FeatureSpec


def standardisation(spec: FeatureSpec, stats: dict[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each sensor's mean and variance, as the model standardises windows (0 and 1 for a sensor
    the spec does not normalise, variance 1 for a constant one)."""
    mean, variance = zip(*(_moments(stats, f.name) if f.normalize else (0.0, 1.0) for f in spec.sequences))
    return mean, variance


def _moments(stats: dict[str, Any], name: str) -> tuple[float, float]:
    if name not in stats or stats[name].get("mean") is None:
        raise ValueError(f"features.{name}: no statistics for this sensor in the dataset's stats.json")
    std = float(stats[name].get("std") or 0.0)
    return float(stats[name]["mean"]), (std * std if std > 0 else 1.0)
