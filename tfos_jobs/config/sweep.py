"""The sweep file (`conf/sweep.toml`): what to search, how, and where results go.

Parameters are keys of the training config (`train.learning_rate`, `train.model.num_layers`):
a trial's config is the base config with the trial's values set (`search.space.trial_config`),
so every value is checked by the config's own validation before any Spark job starts. The names
a sweep chooses from (its goal, its algorithm, Optuna's sampler, and its pruner,
`sweep.early_stopping`) are typed here once; every other module compares with these.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from tfos_jobs.config.loading import apply_override as apply_config_override
from tfos_jobs.config.loading import build, read_toml
from tfos_jobs.errors import ConfigError
from tfos_jobs.names import Name

ParamValue = int | float | str | bool  # a searched setting's value, as a trial is given it


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


@dataclass(frozen=True)
class Param:
    """One searched config key. int/float take `low`..`high` (inclusive) on a linear or log
    scale; categorical takes `values`. A grid uses `values` when given, else every `step`
    of a linear int range, else `grid_points` points spaced on the parameter's scale."""

    key: str
    type: Literal["int", "float", "categorical"]
    low: int | float | None = None  # as written: an int stays an int (the sweep's fingerprint)
    high: int | float | None = None
    scale: Literal["linear", "log"] = "linear"
    values: tuple[ParamValue, ...] | None = None
    step: int = 1
    grid_points: int = 3

    @property
    def column(self) -> str:
        """Its name in the results table: the key without `train.`, dots as underscores."""
        return self.key.removeprefix("train.").replace(".", "_")

    def grid(self) -> list[ParamValue]:
        if self.values is not None:
            return list(self.values)
        assert self.low is not None and self.high is not None
        if self.type == "int" and self.scale == "linear":
            return list(range(int(self.low), int(self.high) + 1, self.step))
        n = self.grid_points
        if self.type == "int":  # log scale: grid_points distinct integers, evenly spaced in log
            lo, hi = math.log(self.low), math.log(self.high)
            return sorted({round(math.exp(lo + (hi - lo) * i / max(1, n - 1))) for i in range(n)})
        if n == 1:
            return [float(self.low)]
        if self.scale == "log":
            lo, hi = math.log(self.low), math.log(self.high)
            return [float(f"{math.exp(lo + (hi - lo) * i / (n - 1)):.6g}") for i in range(n)]
        return [float(f"{self.low + (self.high - self.low) * i / (n - 1):.6g}") for i in range(n)]


@dataclass(frozen=True)
class SweepConfig:
    dir: str
    params: tuple[Param, ...]
    metric: str = "val_auc"  # a key of the training history: val_auc, val_loss, val_accuracy, ...
    goal: GoalName = Goal.MAXIMIZE.value
    algorithm: AlgorithmName = Algorithm.RANDOM.value  # Optuna's sampler
    max_trials: int = 8
    max_parallel_trials: int = 2
    workers_per_trial: int = 1  # >1: each trial is a TFoS cluster of that many workers
    time_budget_seconds: int = 0  # 0: no limit; else no trial starts after it and running ones stop
    seed: int = 0
    early_stopping: PrunerName = Pruner.MEDIAN.value  # Optuna's pruner
    warmup_epochs: int = 1  # the first epoch at whose end a pruner may stop a trial (0 and 1: the first)
    min_trials: int = 3  # median, percentile: completed trials that must have reached an epoch to judge there
    percentile: float = 25.0  # percentile: a trial goes on only among the best this percent of the completed ones
    storage: str = ""  # "": study.journal in the sweep dir; else an SQLAlchemy URL (sqlite:///..., postgresql://...)
    study_name: str = ""  # "": <last part of dir>-<fingerprint's first 8 characters>
    fixed: dict[str, ParamValue] = field(default_factory=dict)  # config keys set for every trial

    @property
    def sampler(self) -> str:
        """The algorithm's own name: "bayesian" is TPE's earlier name, kept for older sweep files."""
        return Algorithm.TPE.value if self.algorithm == Algorithm.BAYESIAN else self.algorithm

    def fingerprint(self) -> str:
        """What makes two sweeps the same sweep (resume): not the limits, which may change between
        runs, nor where the study is kept; a setting only the percentile pruner reads only with it."""
        keep = {k: v for k, v in asdict(self).items()
                if k not in ("dir", "max_trials", "max_parallel_trials", "time_budget_seconds", "storage",
                             "study_name", "percentile")}
        keep["algorithm"] = self.sampler
        if self.early_stopping == Pruner.PERCENTILE:
            keep["percentile"] = self.percentile
        return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


_PARAM_KEYS = {f.name for f in fields(Param)} - {"key"}
_SWEEP_KEYS = {f.name for f in fields(SweepConfig)}


def load(path: str | Path, overrides: Sequence[str] = ()) -> SweepConfig:
    """Read and validate the sweep file, with the command line's `--set sweep.*` / `params.*` items."""
    tables: dict[str, Any] = copy.deepcopy(read_toml(path, "sweep file"))
    for item in overrides:
        apply_override(tables, item)
    return from_tables(tables, str(path))


def checked(sweep: SweepConfig) -> SweepConfig:
    """A sweep built in code, checked as the sweep file's are (the same errors, naming the key)."""
    params = {p.key: {k: v for k, v in asdict(p).items() if k != "key" and v is not None} for p in sweep.params}
    return from_tables({"sweep": {k: v for k, v in asdict(sweep).items() if k != "params"}, "params": params})


def apply_override(raw: dict[str, Any], item: str) -> None:
    """`sweep.max_trials=20`, `sweep.fixed.train.epochs=2`, `params.train.learning_rate.high=0.1`:
    parameter and fixed keys are config keys, dots included."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if key.startswith("params.") and key.count(".") >= 2:
        param, _, name = key.removeprefix("params.").rpartition(".")
        table = raw.setdefault("params", {}).setdefault(param, {})
    elif key.startswith("sweep.fixed.") and sep:
        table, name = raw.setdefault("sweep", {}).setdefault("fixed", {}), key.removeprefix("sweep.fixed.")
    else:
        apply_config_override(raw, item)
        return
    holder: dict[str, Any] = {}  # the value alone, read as `--set` reads it
    apply_config_override(holder, f"v={text}")
    table[name] = holder["v"]


def from_tables(raw: Mapping[str, Any], where: str = "sweep") -> SweepConfig:
    """The sweep's tables, built by the config's typed loader (`config.loading.build`: unknown
    keys, types and names are refused naming the key), then checked across settings."""
    unknown = set(raw) - {"sweep", "params"}
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {sorted(unknown)}; expected [sweep] and [params.\"<config key>\"]")
    table = raw.get("sweep", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [sweep] must be a table")
    bad = set(table) - _SWEEP_KEYS
    if bad:
        raise ConfigError(f"{where}: unknown key(s) sweep.{', sweep.'.join(sorted(bad))}; known: {sorted(_SWEEP_KEYS - {'params'})}")
    if "dir" not in table:
        raise ConfigError(f"{where}: sweep.dir is required (where trials and results go)")
    params_raw = raw.get("params", {})
    if not params_raw:
        raise ConfigError(f"{where}: no parameters; add [params.\"train.learning_rate\"] tables")
    params = tuple(_param(key, spec) for key, spec in params_raw.items())
    sweep = replace(build(SweepConfig, {**table, "params": ()}, "sweep"), params=params)
    _validate(sweep)
    return sweep


def _param(key: str, spec: Any) -> Param:
    where = f"params.{key}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a table with type = \"int\" | \"float\" | \"categorical\"")
    bad = set(spec) - _PARAM_KEYS
    if bad:
        raise ConfigError(f"{where}: unknown key(s) {sorted(bad)}; known: {sorted(_PARAM_KEYS)}")
    param: Param = build(Param, {**spec, "key": key}, where)
    if param.type == "categorical":
        if not param.values:
            raise ConfigError(f"{where}.values: a categorical parameter needs a non-empty list of values")
    elif param.values is None:
        if param.low is None or param.high is None:
            raise ConfigError(f"{where}.{'high' if param.low is not None else 'low'}: a number is required "
                              f"for a {param.type} parameter")
        if param.low > param.high:
            raise ConfigError(f"{where}: low {param.low} is above high {param.high}")
        if param.scale == "log" and param.low <= 0:
            raise ConfigError(f"{where}: a log scale needs low > 0, got {param.low}")
    for name, value in (("step", param.step), ("grid_points", param.grid_points)):
        if value < 1:
            raise ConfigError(f"{where}.{name}: a positive integer is required, got {value!r}")
    return param


def _validate(sweep: SweepConfig) -> None:
    checks = [
        (sweep.algorithm != Algorithm.CMAES or importlib.util.find_spec("cmaes") is not None,
         "sweep.algorithm = \"cmaes\" needs the cmaes package: pip install cmaes"),
        (0 < sweep.percentile < 100, f"sweep.percentile: {sweep.percentile!r} is not a number between 0 and 100"),
        (not sweep.storage or _is_url(sweep.storage),
         "sweep.storage: not an SQLAlchemy URL such as sqlite:///path/study.db or postgresql://user@host/db "
         "(leave it empty for study.journal in the sweep directory)"),
        (sweep.max_trials >= 1, "sweep.max_trials: must be at least 1"),
        (sweep.max_parallel_trials >= 1, "sweep.max_parallel_trials: must be at least 1"),
        (sweep.workers_per_trial >= 1, "sweep.workers_per_trial: must be at least 1"),
        (sweep.time_budget_seconds >= 0, "sweep.time_budget_seconds: must be 0 (no limit) or positive"),
        (sweep.warmup_epochs >= 0 and sweep.min_trials >= 1, "sweep.warmup_epochs >= 0 and sweep.min_trials >= 1 are required"),
        (bool(sweep.metric), "sweep.metric: required, e.g. \"val_auc\" or \"val_loss\""),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    for key in (p.key for p in sweep.params):
        if not key.startswith("train."):
            raise ConfigError(f"params.{key}: only training settings (train.*) can be searched")
        if key in sweep.fixed:
            raise ConfigError(f"params.{key}: also set in sweep.fixed; search it or fix it, not both")


def _is_url(text: str) -> bool:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(text)
    except (ArgumentError, ValueError):  # its message would repeat the URL, password included
        return False
    return "://" in text


