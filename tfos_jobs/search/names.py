"""The names a sweep file chooses from: its goal, its algorithm (Optuna's sampler) and its
pruner (`sweep.early_stopping`). Every other module compares with these instead of typing them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tfos_jobs.names import Name


class Goal(Name):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class Algorithm(Name):
    GRID = "grid"
    RANDOM = "random"
    TPE = "tpe"
    CMAES = "cmaes"
    BAYESIAN = "bayesian"  # TPE's earlier name, kept for older sweep files


class Pruner(Name):
    MEDIAN = "median"
    PERCENTILE = "percentile"
    HYPERBAND = "hyperband"
    SUCCESSIVE_HALVING = "successive_halving"
    NONE = "none"


GOALS = tuple(g.value for g in Goal)
ALGORITHMS = tuple(a.value for a in Algorithm)
PRUNERS = tuple(p.value for p in Pruner)

if TYPE_CHECKING:  # a type checker reads the settings as str; the config loader checks their values
    GoalName = str
    AlgorithmName = str
    PrunerName = str
else:  # the sweep file's field types: `Literal` of the names above, typed once
    GoalName, AlgorithmName, PrunerName = Literal[GOALS], Literal[ALGORITHMS], Literal[PRUNERS]
