"""Where the next trial's settings come from: grid, random, or Bayesian (Optuna, ask/tell).

Grid and random settings depend only on the trial number (and the seed), so a resumed
sweep proposes the same trials again. The Bayesian sampler is rebuilt from the finished
trials on every run, so it also continues where it stopped.
"""
from __future__ import annotations

import itertools
import math
import random
import warnings
from typing import Any, Protocol

from tfos_jobs.search.space import Param, ParamValue, SweepConfig
from tfos_jobs.search.trials import TrialStatus


class Sampler(Protocol):
    def total(self) -> int:
        """How many trials the sweep runs."""

    def propose(self, number: int) -> dict[str, ParamValue]:
        """Settings for trial `number` (0-based)."""

    def tell(self, number: int, settings: dict[str, ParamValue], status: str, value: float | None) -> None:
        """A trial's outcome."""


class GridSampler:
    def __init__(self, sweep: SweepConfig):
        keys = [p.key for p in sweep.params]
        self.points = [dict(zip(keys, combo)) for combo in itertools.product(*(p.grid() for p in sweep.params))]
        self.max_trials = sweep.max_trials

    def total(self) -> int:
        return min(self.max_trials, len(self.points))

    def propose(self, number: int) -> dict[str, ParamValue]:
        return dict(self.points[number])

    def tell(self, number, settings, status, value) -> None:
        pass


class RandomSampler:
    def __init__(self, sweep: SweepConfig):
        self.params, self.seed, self.max_trials = sweep.params, sweep.seed, sweep.max_trials

    def total(self) -> int:
        return self.max_trials

    def propose(self, number: int) -> dict[str, ParamValue]:
        rng = random.Random(f"{self.seed}:{number}")
        return {p.key: _draw(p, rng) for p in self.params}

    def tell(self, number, settings, status, value) -> None:
        pass


def _draw(p: Param, rng: random.Random) -> ParamValue:
    if p.values is not None:
        return p.values[rng.randrange(len(p.values))]
    assert p.low is not None and p.high is not None
    if p.scale == "log":
        x = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    else:
        x = rng.uniform(p.low, p.high)  # an int parameter draws below instead
    if p.type == "int":
        if p.scale == "linear":
            return rng.randint(int(p.low), int(p.high))
        return min(int(p.high), max(int(p.low), round(x)))
    return float(f"{x:.6g}")


class OptunaSampler:
    """Optuna's TPE through ask/tell on the driver; trials themselves never import Optuna."""

    def __init__(self, sweep: SweepConfig):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.max_trials = sweep.max_trials
        self.distributions = {p.key: _distribution(optuna, p) for p in sweep.params}
        # TPE models the space after its random start-up trials: a third of the sweep (3 to 10),
        # and with trials in flight at once it assumes their results ("constant liar").
        startup = min(10, max(3, sweep.max_trials // 3))
        with warnings.catch_warnings():  # constant_liar is marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=sweep.seed, n_startup_trials=startup,
                                                 constant_liar=sweep.max_parallel_trials > 1)
        self.study = optuna.create_study(direction=sweep.goal, sampler=sampler)
        self.asked: dict[int, Any] = {}

    def total(self) -> int:
        return self.max_trials

    def propose(self, number: int) -> dict[str, ParamValue]:
        trial = self.study.ask(self.distributions)
        self.asked[number] = trial
        return {key: trial.params[key] for key in self.distributions}

    def tell(self, number: int, settings: dict[str, ParamValue], status: str, value: float | None) -> None:
        state = self.optuna.trial.TrialState
        done = status == TrialStatus.COMPLETED and value is not None and math.isfinite(value)
        outcome = state.COMPLETE if done else state.PRUNED if status == TrialStatus.PRUNED else state.FAIL
        if number in self.asked:
            trial = self.asked.pop(number)
            if done:
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=outcome)
            return
        # A trial of an earlier run of this sweep: teach the study what it learned.
        self.study.add_trial(self.optuna.trial.create_trial(
            params=settings, distributions=self.distributions, value=value if done else None, state=outcome))


def _distribution(optuna, p: Param):
    d = optuna.distributions
    if p.values is not None:
        return d.CategoricalDistribution(list(p.values))
    if p.type == "int":
        return d.IntDistribution(int(p.low), int(p.high), log=p.scale == "log")
    return d.FloatDistribution(float(p.low), float(p.high), log=p.scale == "log")


def make(sweep: SweepConfig) -> Sampler:
    return {"grid": GridSampler, "random": RandomSampler, "bayesian": OptunaSampler}[sweep.algorithm](sweep)
