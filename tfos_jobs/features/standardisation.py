"""How sensor windows are standardised, from the dataset's statistics: one definition for the
model's in-graph layer (`model.sequence`) and the baselines it is compared with (`data.baselines`)."""
from __future__ import annotations

from typing import Any

from tfos_jobs.features.spec import FeatureSpec

# In `_meta/stats.json`, under a sensor spec's key: each asset's per-sensor count, mean and std over its train
# windows (lists in sensor order), written by prepare and read by the model and the prediction function.
STATS_PER_ASSET = "per_asset"


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


def per_asset(spec: FeatureSpec, stats: dict[str, Any]) -> tuple[tuple[str, ...], list[list[float]], list[list[float]]]:
    """The assets of the train split and one row of sensor means and variances per asset, then
    the fleet's row (for an asset the model never saw). Unlike machines differ in level and
    spread; standardising each by its own train windows lets one model learn their shapes. An
    asset's std is floored at `ASSET_STD_FLOOR` of the fleet's: a sensor nearly constant on one
    machine would otherwise blow its noise, or any move away from that constant, up to dominate
    the error; what remains of that (a rare 0/1 flag, whose fleet std is tiny) the model's clip
    bounds (`train.model.clip`). Chosen on ASD, MSL and the embedded fleet (docs/prepare.md): a
    floor on the fleet's range instead did as well on the first two and failed the third, whose
    range its outliers stretch to 20 stds. A dataset prepared without per-asset statistics gives
    the fleet's row alone."""
    fleet_mean, fleet_variance = standardisation(spec, stats)
    key = spec.key
    assets = (stats.get(key.name) or {}).get(STATS_PER_ASSET, {}) if key is not None else {}
    means, variances = [], []
    for asset in sorted(assets):
        own = assets[asset]
        means.append([float(m) if f.normalize and m is not None else fm
                      for f, m, fm in zip(spec.sequences, own["mean"], fleet_mean)])
        variances.append([max(float(s or 0.0) ** 2, ASSET_STD_FLOOR ** 2 * fv) if f.normalize else fv
                          for f, s, fv in zip(spec.sequences, own["std"], fleet_variance)])
    return tuple(sorted(assets)), [*means, list(fleet_mean)], [*variances, list(fleet_variance)]


ASSET_STD_FLOOR = 0.25  # an asset's std, at least this share of the fleet's
