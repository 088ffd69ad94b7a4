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
    the error; what remains of that the model's clip bounds (`train.model.clip`). A two-valued
    metric (a 0/1 command flag) is scaled by half its span on every asset and in the fleet's row:
    by its std, a flag that rarely fires would stand `1 / std` (hundreds of) stds out each time it
    does, and the flags' routine firings would outweigh the readings that matter. Chosen on ASD,
    MSL and the embedded fleet (docs/prepare.md): a floor on the fleet's range instead did as well
    on the first two and failed the third, whose range its outliers stretch to 20 stds. A dataset
    prepared without per-asset statistics gives the fleet's row alone."""
    fleet_mean, fleet_variance = standardisation(spec, stats)
    flag = [(two_valued_span(stats, f.name) if f.normalize else None) for f in spec.sequences]
    key = spec.key
    assets = (stats.get(key.name) or {}).get(STATS_PER_ASSET, {}) if key is not None else {}
    means, variances = [], []
    for asset in sorted(assets):
        own = assets[asset]
        means.append([float(m) if f.normalize and m is not None else fm
                      for f, m, fm in zip(spec.sequences, own["mean"], fleet_mean)])
        variances.append([max(float(s or 0.0) ** 2, ASSET_STD_FLOOR ** 2 * fv, _flag_variance(span)) if f.normalize
                          else fv for f, s, fv, span in zip(spec.sequences, own["std"], fleet_variance, flag)])
    fleet_row = [max(fv, _flag_variance(span)) if span is not None else fv for fv, span in zip(fleet_variance, flag)]
    return tuple(sorted(assets)), [*means, list(fleet_mean)], [*variances, fleet_row]


def two_valued_span(stats: dict[str, Any], name: str) -> float | None:
    """max - min of a sensor whose train values are its min and its max only, else None. Told from
    the moments alone (Bhatia-Davis: variance <= (max - mean)(mean - min), equal only when every
    value is at one end), so prepare needs no pass over the data for it."""
    own = stats.get(name) or {}
    if any(own.get(k) is None for k in ("mean", "std", "min", "max")):
        return None
    mean, std, low, high = (float(own[k]) for k in ("mean", "std", "min", "max"))
    span = high - low
    if not span > 0:
        return None
    bound = (high - mean) * (mean - low)
    return span if bound > 0 and std * std >= (1.0 - TWO_VALUED_TOLERANCE) * bound else None


def _flag_variance(span: float | None) -> float:
    return 0.0 if span is None else (0.5 * span) ** 2


ASSET_STD_FLOOR = 0.25  # an asset's std, at least this share of the fleet's
TWO_VALUED_TOLERANCE = 1e-4  # relative: the stored moments' rounding; a third value that rare changes little
