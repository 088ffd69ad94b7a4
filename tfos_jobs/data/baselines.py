"""The plain anomaly scores of sensor windows against which an autoencoder's is judged: what a
data scientist tries first, fitted on the train windows, scored on the same windows as the model.

  * `window_std`: the window's standard deviation (standardised as the model standardises),
    averaged over the sensors;
  * `profile_distance`: the mean squared distance of the standardised window from the train
    windows' mean profile (each sensor's mean at each step of a window);
  * `zscore`: per step, the mean over sensors of the squared z-score against the asset's own
    train mean and std; the window's maximum;
  * `pca_max`, `pca_mean`: a PCA fitted on the asset's own train rows (the values as read, as
    the field's baseline is; the components that explain 90 % of the variance); each step's
    squared reconstruction error, the window's maximum and mean;
  * `random`: a uniform score drawn from the window's key and start: what any figure would be
    by chance (AUPRC: the share of anomalous windows; point-adjusted F1: often high).
An asset without train windows of its own (a split by asset) is scored by the same fits made on
a sample of the fleet's train windows. All of it runs on the executors, one asset's train and
scored windows together (numpy on pandas frames, plain values only); the driver receives the
mean profile's sums and the sample and nothing else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.features.standardisation import standardisation

WINDOW_STD = "window_std"
PROFILE_DISTANCE = "profile_distance"
ZSCORE = "zscore"
PCA_MAX = "pca_max"
PCA_MEAN = "pca_mean"
RANDOM = "random"
NAMES = (WINDOW_STD, PROFILE_DISTANCE, ZSCORE, PCA_MAX, PCA_MEAN, RANDOM)
TITLES = {WINDOW_STD: "window standard deviation",
          PROFILE_DISTANCE: "distance from the train mean profile",
          ZSCORE: "per-sensor z-score (max over the window)",
          PCA_MAX: "PCA reconstruction error (max over the window)",
          PCA_MEAN: "PCA reconstruction error (mean over the window)",
          RANDOM: "random score"}
FIT = "_baseline_fit"  # per scored window: "asset" (its own train windows) or "fleet"
PCA_VARIANCE = 0.9
FLEET_SAMPLE = 2000  # train windows the fleet-wide fits are made on


@dataclass(frozen=True)
class Standardizer:
    """Each sensor's mean and std (1 where the spec does not normalise it, or the std is 0),
    and its range over the train split (1 for a constant sensor), which floors a z-score's std."""

    sensors: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    span: tuple[float, ...]

    @classmethod
    def of(cls, spec: FeatureSpec, stats: dict[str, Any]) -> "Standardizer":
        """The model's own standardisation; ValueError when `stats` lack a sensor."""
        mean, variance = standardisation(spec, stats)
        names = tuple(f.name for f in spec.sequences)
        low = tuple(float(stats[s].get("min") or 0.0) for s in names)
        high = tuple(float(stats[s].get("max") or 0.0) for s in names)
        span = tuple(h - lo if h > lo else 1.0 for lo, h in zip(low, high))
        return cls(names, mean, tuple(math.sqrt(v) for v in variance), span)

    def raw(self, batch: pd.DataFrame) -> np.ndarray:
        """[windows, steps, sensors] float64, as read."""
        return np.stack([np.stack(batch[s].to_numpy()).astype(np.float64) for s in self.sensors], axis=-1)

    def apply(self, batch: pd.DataFrame) -> np.ndarray:
        """[windows, steps, sensors] float64, standardised."""
        return (self.raw(batch) - np.asarray(self.mean)) / np.asarray(self.std)


@dataclass(frozen=True)
class Fit:
    """What `zscore` and the PCA scores need, fitted on rows of train windows (plain values)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    centre: tuple[float, ...]  # the rows' mean, where the PCA is centred
    components: tuple[tuple[float, ...], ...]

    @classmethod
    def of(cls, rows: np.ndarray, std: Standardizer) -> "Fit":
        """`rows`: [n, sensors] raw values."""
        floor = 1e-3 * np.asarray(std.span)
        centre = rows.mean(axis=0)
        _, singular, vt = np.linalg.svd(rows - centre, full_matrices=False)
        variance = singular ** 2
        explained = np.cumsum(variance) / variance.sum() if variance.sum() > 0 else np.ones_like(variance)
        k = int(np.searchsorted(explained, PCA_VARIANCE) + 1)
        return cls(tuple(centre), tuple(np.maximum(rows.std(axis=0), floor)), tuple(centre),
                   tuple(tuple(c) for c in vt[:k]))

    def zscore(self, x: np.ndarray) -> np.ndarray:
        z = (x - np.asarray(self.mean)) / np.asarray(self.std)
        return (z ** 2).mean(axis=2).max(axis=1)

    def pca(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each window's largest and mean squared reconstruction error over its steps."""
        centred = x - np.asarray(self.centre)
        v = np.asarray(self.components)
        residual = centred - centred @ v.T @ v
        error = (residual ** 2).sum(axis=2)
        return error.max(axis=1), error.mean(axis=1)


def mean_profile(windows: DataFrame, standardizer: Standardizer) -> np.ndarray | None:
    """[steps, sensors]: the mean standardised value at each step of `windows`; None when there is
    no window. Each task sends one row of sums."""
    std = standardizer

    def sums(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        total, count = None, 0
        for batch in batches:
            if len(batch):
                x = std.apply(batch).sum(axis=0)
                total = x if total is None else total + x
                count += len(batch)
        if count and total is not None:  # a counted batch set the total
            yield pd.DataFrame({"n": [count], "shape": [list(total.shape)], "sums": [total.ravel().tolist()]})

    rows = windows.select(*std.sensors).mapInPandas(sums, "n long, shape array<int>, sums array<double>").collect()
    if not rows:
        return None
    total = sum(np.asarray(r["sums"]) for r in rows)
    return (total / sum(r["n"] for r in rows)).reshape(rows[0]["shape"])


def fleet_fit(train: DataFrame, standardizer: Standardizer, seed: int = 0) -> Fit | None:
    """The fits made on (up to `FLEET_SAMPLE`) of the fleet's train windows; None without any."""
    sample = train.select(*standardizer.sensors).orderBy(F.rand(seed)).limit(FLEET_SAMPLE).toPandas()
    if not len(sample):
        return None
    return Fit.of(standardizer.raw(sample).reshape(-1, len(standardizer.sensors)), standardizer)


def scores(train: DataFrame, scored: DataFrame, key: str, start: str, standardizer: Standardizer,
           profile: np.ndarray | None, fleet: Fit | None) -> DataFrame:
    """`key` and `start` of each `scored` window with every baseline (null where it has no fit)
    and `FIT`. `train`: the train windows (key and sensors)."""
    std = standardizer
    reference = None if profile is None else profile.tolist()
    steps_min = len(std.sensors) + 1  # rows a PCA of the sensors needs

    def per_asset(mine: pd.DataFrame, batch: pd.DataFrame) -> pd.DataFrame:
        if not len(batch):
            return pd.DataFrame(columns=[key, start, *NAMES[:-1], FIT])
        out = batch[[key, start]].copy()
        x = std.raw(batch)
        z = (x - np.asarray(std.mean)) / np.asarray(std.std)
        out[WINDOW_STD] = z.std(axis=1).mean(axis=1)
        out[PROFILE_DISTANCE] = None if reference is None else ((z - np.asarray(reference)) ** 2).mean(axis=(1, 2))
        rows = std.raw(mine).reshape(-1, len(std.sensors)) if len(mine) else np.empty((0, len(std.sensors)))
        fit, by = (Fit.of(rows, std), "asset") if len(rows) >= steps_min else (fleet, "fleet")
        if fit is None:
            out[ZSCORE] = out[PCA_MAX] = out[PCA_MEAN] = None
        else:
            out[ZSCORE] = fit.zscore(x)
            out[PCA_MAX], out[PCA_MEAN] = fit.pca(x)
        out[FIT] = by
        return out

    key_type = dict(scored.dtypes)[key]
    schema = (f"`{key}` {key_type}, `{start}` {dict(scored.dtypes)[start]}, "
              + ", ".join(f"{n} double" for n in NAMES[:-1]) + f", {FIT} string")
    mine = train.select(key, *std.sensors)
    theirs = scored.select(key, start, *std.sensors)
    fitted = mine.groupBy(key).cogroup(theirs.groupBy(key)).applyInPandas(per_asset, schema)
    return fitted.withColumn(RANDOM, F.pmod(F.xxhash64(F.col(key), F.col(start).cast("long")), F.lit(1_000_003))
                             .cast("double") / 1_000_003.0)
