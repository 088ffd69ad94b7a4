"""Where the next trial's settings come from: grid, random, or Bayesian (Optuna, ask/tell).

Grid and random settings depend only on the trial number (and the seed), so a resumed
sweep proposes the same trials again. The Bayesian sampler is rebuilt from the finished
trials on every run, so it also continues where it stopped.
"""
from __future__ import annotations

import itertools
import math
import random
from typing import Any, Protocol

from tfos_jobs.search.space import Param, ParamValue, SweepConfig


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
        x = rng.uniform(p.low, p.high)
    if p.type == "int":
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
        self.study = optuna.create_study(direction=sweep.goal,
                                         sampler=optuna.samplers.TPESampler(seed=sweep.seed))
        self.asked: dict[int, Any] = {}

    def total(self) -> int:
        return self.max_trials

    def propose(self, number: int) -> dict[str, ParamValue]:
        trial = self.study.ask(self.distributions)
        self.asked[number] = trial
        return {key: trial.params[key] for key in self.distributions}

    def tell(self, number: int, settings: dict[str, ParamValue], status: str, value: float | None) -> None:
        state = self.optuna.trial.TrialState
        if number in self.asked:
            trial = self.asked.pop(number)
            if status == "completed" and value is not None:
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=state.PRUNED if status == "pruned" else state.FAIL)
            return
        # A trial of an earlier run of this sweep: teach the study what it learned.
        done = status == "completed" and value is not None
        self.study.add_trial(self.optuna.trial.create_trial(
            params=settings, distributions=self.distributions, value=value if done else None,
            state=state.COMPLETE if done else state.FAIL))


def _distribution(optuna, p: Param):
    d = optuna.distributions
    if p.values is not None:
        return d.CategoricalDistribution(list(p.values))
    if p.type == "int":
        return d.IntDistribution(int(p.low), int(p.high), log=p.scale == "log")
    return d.FloatDistribution(float(p.low), float(p.high), log=p.scale == "log")


def make(sweep: SweepConfig) -> Sampler:
    return {"grid": GridSampler, "random": RandomSampler, "bayesian": OptunaSampler}[sweep.algorithm](sweep)
