"""Two plain anomaly scores of sensor windows, against which an autoencoder's is judged.

  * `profile_distance`: the mean squared distance of the window, standardised as the model
    standardises it (the train split's mean and std per sensor), from the train windows' mean
    profile (each sensor's mean at each step of a window);
  * `window_std`: the window's standard deviation, standardised, averaged over the sensors.

Neither learns anything, so a model that does not beat them on the eval assets adds nothing
on that data. Both run on the executors over whole windows (numpy on Arrow batches, plain
values only); the driver receives the profile's sums and nothing else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame

from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.features.standardisation import standardisation

PROFILE_DISTANCE = "profile_distance"
WINDOW_STD = "window_std"
NAMES = (PROFILE_DISTANCE, WINDOW_STD)


@dataclass(frozen=True)
class Standardizer:
    """Each sensor's mean and std (1 where the spec does not normalise it, or the std is 0)."""

    sensors: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @classmethod
    def of(cls, spec: FeatureSpec, stats: dict[str, Any]) -> "Standardizer":
        """The model's own standardisation; ValueError when `stats` lack a sensor."""
        mean, variance = standardisation(spec, stats)
        return cls(tuple(f.name for f in spec.sequences), mean, tuple(math.sqrt(v) for v in variance))

    def apply(self, batch: pd.DataFrame) -> np.ndarray:
        """[windows, steps, sensors] float64, standardised."""
        x = np.stack([np.stack(batch[s].to_numpy()).astype(np.float64) for s in self.sensors], axis=-1)
        return (x - np.asarray(self.mean)) / np.asarray(self.std)


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


def scores(windows: DataFrame, keys: list[str], standardizer: Standardizer, profile: np.ndarray | None) -> DataFrame:
    """`keys` of each window with its `profile_distance` (null without a profile) and `window_std`."""
    std, mean = standardizer, None if profile is None else profile.tolist()

    def score(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        reference = None if mean is None else np.asarray(mean)
        for batch in batches:
            if not len(batch):
                continue
            out = batch[keys].copy()
            x = std.apply(batch)
            out[PROFILE_DISTANCE] = None if reference is None else ((x - reference) ** 2).mean(axis=(1, 2))
            out[WINDOW_STD] = x.std(axis=1).mean(axis=1)
            yield out

    schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in windows.select(*keys).schema.fields)
    return windows.select(*keys, *std.sensors).mapInPandas(
        score, f"{schema}, {PROFILE_DISTANCE} double, {WINDOW_STD} double")
