"""The sweep file (`conf/sweep.toml`): what to search, how, and where results go.

Parameters are keys of the training config (`train.learning_rate`, `train.model.num_layers`):
a trial's config is the base config with the trial's values set, so every value is checked
by the same validation as `--set` before any Spark job starts.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from tfos_jobs import config as config_mod
from tfos_jobs.config.loading import build
from tfos_jobs.config.train import KIND_KEY as MODEL_KIND
from tfos_jobs.contracts.trial import ParamValue
from tfos_jobs.errors import ConfigError
from tfos_jobs.search.names import Algorithm, AlgorithmName, Goal, GoalName, Pruner, PrunerName



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


# The config a sweep varies: a TOML file, or its tables as a dict (`config.to_dict` of a Config).
BaseConfig = str | Path | Mapping[str, Any]


def load(path: str | Path, overrides: Sequence[str] = (), base_config: BaseConfig | None = None,
         base_overrides: Sequence[str] = ()) -> SweepConfig:
    """Read and validate the sweep file; with `base_config`, also check that every parameter
    value and fixed setting makes a valid training config."""
    return from_tables(config_mod.read_toml(path, "sweep file"), overrides, base_config, base_overrides, str(path))


def from_tables(raw: Mapping[str, Any], overrides: Sequence[str] = (), base_config: BaseConfig | None = None,
                base_overrides: Sequence[str] = (), where: str = "sweep") -> SweepConfig:
    """A sweep from its tables (`{"sweep": {...}, "params": {...}}`, as in the sweep file), checked as `load` does."""
    tables: dict[str, Any] = copy.deepcopy(dict(raw))
    for item in overrides:
        apply_override(tables, item)
    sweep = from_dict(tables, where)
    if base_config is not None:
        extreme_configs(base_config, base_overrides, sweep)
    return sweep




def model_kinds(sweep: SweepConfig, base_kind: str) -> list[str]:
    """Every `train.model.kind` a trial may build: the base config's, a fixed one, the searched values."""
    kinds = [str(sweep.fixed.get(MODEL_KIND, base_kind))]
    kinds += [str(v) for p in sweep.params if p.key == MODEL_KIND for v in p.values or ()]
    return list(dict.fromkeys(kinds))


def extreme_configs(base_config: BaseConfig, base_overrides: Sequence[str], sweep: SweepConfig) -> list[config_mod.Config]:
    """Trial configs that together hold every parameter's low, high and each value once."""
    return [trial_config(base_config, base_overrides, sweep, settings) for settings in _extremes(sweep)]


def check_models(base_config: BaseConfig, base_overrides: Sequence[str], sweep: SweepConfig) -> None:
    """Every model the trials build (each `train.model` of `extreme_configs`), imported and
    built once on the driver (`model.builder.check_model_fn`); an error names the trials' model."""
    from tfos_jobs.model.builder import check_model_fn

    models = {cfg.train.model: cfg for cfg in extreme_configs(base_config, base_overrides, sweep)}
    for model_cfg, cfg in models.items():
        try:
            check_model_fn(model_cfg=model_cfg, spec=cfg.features)
        except ConfigError as e:
            if len(models) == 1:
                raise
            shown = f"train.model.kind={model_cfg.kind!r}" + (f", params {dict(model_cfg.params)}" if model_cfg.params else "")
            raise ConfigError(f"{e} (the trials with {shown})") from None


def apply_override(raw: dict[str, Any], item: str) -> None:
    """`sweep.max_trials=20`, `sweep.fixed.train.epochs=2`, `params.train.learning_rate.high=0.1`:
    parameter and fixed keys are config keys, dots included."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if key.startswith("params.") and key.count(".") >= 2:
        name, _, field_name = key.removeprefix("params.").rpartition(".")
        table = raw.setdefault("params", {}).setdefault(name, {})
        holder: dict[str, Any] = {}
        config_mod.apply_override(holder, f"v={text}")
        table[field_name] = holder["v"]
        return
    if key.startswith("sweep.fixed.") and sep:
        holder = {}  # the value alone, read as `--set` reads it
        config_mod.apply_override(holder, f"v={text}")
        raw.setdefault("sweep", {}).setdefault("fixed", {})[key.removeprefix("sweep.fixed.")] = holder["v"]
        return
    config_mod.apply_override(raw, item)


def from_dict(raw: dict[str, Any], where: str = "sweep") -> SweepConfig:
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
    sweep = build(SweepConfig, {**table, "params": ()}, "sweep")
    sweep = replace(sweep, params=params)
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
    keys = [p.key for p in sweep.params]
    for key in keys:
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


def _extremes(sweep: SweepConfig) -> list[dict[str, ParamValue]]:
    """Settings that together touch every parameter's low, high and each value once."""
    out: list[dict[str, ParamValue]] = []
    for p in sweep.params:
        candidates = list(p.values) if p.values is not None else [v for v in (p.low, p.high) if v is not None]
        for v in candidates:
            out.append({p.key: int(v) if p.type == "int" else v})
    return out


def largest(sweep: SweepConfig, key: str, default: ParamValue) -> ParamValue:
    """The largest value config `key` takes in any trial: its parameter's high or largest value,
    its fixed setting, else `default` (the base config's)."""
    for p in sweep.params:
        if p.key == key:
            top = max(p.values) if p.values is not None else p.high
            return default if top is None else top
    return sweep.fixed.get(key, default)


def overrides_for(sweep: SweepConfig, settings: dict[str, ParamValue]) -> list[str]:
    """`--set` items for a trial: the fixed settings, then its parameter values."""
    both = {**sweep.fixed, **settings}
    return [f"{key}={json.dumps(value)}" for key, value in both.items()]


def base(base_config: BaseConfig, overrides: Sequence[str] = ()) -> config_mod.Config:
    """The sweep's config, from its file or its tables, with `overrides` set."""
    if not isinstance(base_config, Mapping):
        return config_mod.load(base_config, overrides)
    raw = copy.deepcopy(dict(base_config))
    for item in overrides:
        config_mod.apply_override(raw, item)
    return config_mod.from_dict(raw)


def trial_config(base_config: BaseConfig, base_overrides: Sequence[str], sweep: SweepConfig,
                 settings: dict[str, ParamValue]) -> config_mod.Config:
    """The base config with the trial's settings; names the parameter when a value is invalid."""
    items = overrides_for(sweep, settings)
    try:
        return base(base_config, [*base_overrides, *items])
    except ConfigError as e:
        raise ConfigError(f"sweep setting {', '.join(items)}: {e}") from None
