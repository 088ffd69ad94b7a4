"""Optuna's samplers and pruners for a sweep: `sweep.algorithm` and `sweep.early_stopping`.

Each trial is asked with a sampler seeded by the sweep's seed and the trial's number, so a trial gets the same draw
whether the sweep runs in one go or is resumed; what a sampler learns (TPE's model, CMA-ES's state) lives in the study
itself, not in the sampler. Grid trials take the grid's points in an order shuffled by the seed alone."""
from __future__ import annotations

import hashlib
import warnings
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from tfos_jobs.config.sweep import Algorithm, Param, Pruner, SweepConfig


def distributions(sweep: SweepConfig) -> dict[str, BaseDistribution]:
    """Each parameter's distribution, by config key; a grid searches the grid's points only."""
    if sweep.sampler == Algorithm.GRID:
        return {p.key: CategoricalDistribution(p.grid()) for p in sweep.params}
    return {p.key: _distribution(p) for p in sweep.params}


def _distribution(p: Param) -> BaseDistribution:
    if p.values is not None:
        return CategoricalDistribution(list(p.values))
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return IntDistribution(int(p.low), int(p.high), log=p.scale == "log")
    return FloatDistribution(float(p.low), float(p.high), log=p.scale == "log")


def grid_size(sweep: SweepConfig) -> int:
    size = 1
    for p in sweep.params:
        size *= len(p.grid())
    return size


def total(sweep: SweepConfig) -> int:
    """How many trials the sweep runs: max_trials, or fewer when the grid has fewer points."""
    return min(sweep.max_trials, grid_size(sweep)) if sweep.sampler == Algorithm.GRID else sweep.max_trials


def independent_params(sweep: SweepConfig) -> list[str]:
    """The parameters CMA-ES does not model and draws at random instead: categorical ones, or
    the only numeric one (CMA-ES needs two or more)."""
    if sweep.sampler != Algorithm.CMAES:
        return []
    numeric = [p.key for p in sweep.params if p.values is None]
    categorical = [p.key for p in sweep.params if p.values is not None]
    return categorical + numeric if len(numeric) < 2 else categorical


def sampler(sweep: SweepConfig, number: int) -> optuna.samplers.BaseSampler:
    """The sampler that proposes trial `number` (from 1)."""
    seed = trial_seed(sweep.seed, number)
    if sweep.sampler == Algorithm.GRID:
        return _GridSampler({p.key: p.grid() for p in sweep.params}, seed=sweep.seed)
    if sweep.sampler == Algorithm.RANDOM:
        return optuna.samplers.RandomSampler(seed=seed)
    if sweep.sampler == Algorithm.CMAES:
        # Parameters CMA-ES cannot model are drawn by its independent (random) sampler; the
        # driver says which once, instead of Optuna warning at every trial.
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    # TPE models the space after its random start-up trials: a third of the sweep (3 to 10),
    # and with trials in flight at once it assumes their results ("constant liar").
    startup = min(10, max(3, sweep.max_trials // 3))
    with warnings.catch_warnings():  # constant_liar is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup,
                                          constant_liar=sweep.max_parallel_trials > 1)


def trial_seed(seed: int, number: int) -> int:
    """A seed per trial, unrelated between neighbouring sweep seeds."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{number}".encode()).digest()[:4], "big") >> 1


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler; the sweep itself stops after its trials, so the sampler does not
    stop the study (which outside `Study.optimize` raises)."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        pass


def pruner(sweep: SweepConfig, max_epochs: int) -> optuna.pruners.BasePruner:
    """The pruner of `sweep.early_stopping`. Steps are epochs counted from 1, so a pruner judges
    a trial from the end of epoch `warmup_epochs` (at least the first) on."""
    kind, warmup = sweep.early_stopping, sweep.warmup_epochs
    common = dict(n_startup_trials=sweep.min_trials, n_warmup_steps=warmup, n_min_trials=sweep.min_trials)
    if kind == Pruner.MEDIAN:
        return optuna.pruners.MedianPruner(**common)
    if kind == Pruner.PERCENTILE:
        return optuna.pruners.PercentilePruner(sweep.percentile, **common)
    if kind == Pruner.HYPERBAND:
        low = max(1, warmup)
        return optuna.pruners.HyperbandPruner(min_resource=low, max_resource=max(low, max_epochs))
    if kind == Pruner.SUCCESSIVE_HALVING:
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, warmup))
    return optuna.pruners.NopPruner()
