"""The configs a sweep's trials train with: the base config with each trial's settings, typed
(`Config.with_settings`), never written out and read again."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from tfos_jobs.config import Config, ModelConfig
from tfos_jobs.config import sweep as sweep_file
from tfos_jobs.config.sweep import ParamValue, SweepConfig
from tfos_jobs.config.train import KIND_KEY as MODEL_KIND
from tfos_jobs.errors import ConfigError


def model_kinds(sweep: SweepConfig, base_kind: str) -> list[str]:
    """Every `train.model.kind` a trial may build: the base config's, a fixed one, the searched values."""
    kinds = [str(sweep.fixed.get(MODEL_KIND, base_kind))]
    kinds += [str(v) for p in sweep.params if p.key == MODEL_KIND for v in p.values or ()]
    return list(dict.fromkeys(kinds))


def trial_config(base: Config, sweep: SweepConfig, settings: Mapping[str, ParamValue]) -> Config:
    """The base config with the sweep's fixed settings and the trial's; names them when a value is invalid."""
    both = {**sweep.fixed, **settings}
    try:
        return base.with_settings(both)
    except ConfigError as e:
        shown = ", ".join(f"{key}={json.dumps(value)}" for key, value in both.items())
        raise ConfigError(f"sweep setting {shown}: {e}") from None


def trial_models(base: Config, sweep: SweepConfig) -> dict[ModelConfig, Config]:
    """Each distinct `train.model` the trials build, with a trial config that builds it, from
    trial configs that together hold every parameter's low, high and each value once: every
    value is checked as a config's, before any trial starts."""
    models: dict[ModelConfig, Config] = {}
    for p in sweep.params:
        candidates = list(p.values) if p.values is not None else [v for v in (p.low, p.high) if v is not None]
        for v in candidates:
            config = trial_config(base, sweep, {p.key: int(v) if p.type == "int" else v})
            models.setdefault(config.train.model, config)
    return models


def largest(sweep: SweepConfig, key: str, default: ParamValue) -> ParamValue:
    """The largest value config `key` takes in any trial: its parameter's high or largest value,
    its fixed setting, else `default` (the base config's)."""
    for p in sweep.params:
        if p.key == key:
            top = max(p.values) if p.values is not None else p.high
            return default if top is None else top
    return sweep.fixed.get(key, default)


@dataclass(frozen=True)
class CheckedSweep:
    """A sweep whose trial values and models were checked against `base` (`check_sweep`): a sweep
    run with that base config does not check them again."""

    base: Config
    sweep: SweepConfig


def check_sweep(base: Config, sweep: SweepConfig) -> CheckedSweep:
    """Every value a trial takes, checked as a config's, and every model the trials build (`trial_models`), imported and
    dry-built once on the driver (`model.builder.check_build`); an error names the trials' model."""
    from tfos_jobs.model.builder import OWN_COMPILE_IGNORES, check_build

    checked = sweep_file.checked(sweep)
    models = trial_models(base, checked)
    unused = [p.key for p in checked.params if p.key in OWN_COMPILE_IGNORES]
    for model_cfg, config in models.items():
        try:
            built = check_build(model_cfg=model_cfg, spec=config.features)
            if built.compiled and unused:
                raise ConfigError(f"train.model.kind: {model_cfg.kind} compiles its model itself ({built.compiled}), "
                                  f"so the sweep's {', '.join(unused)} would change nothing: search a "
                                  "train.model.params value the function reads instead")
        except ConfigError as e:
            if len(models) == 1:
                raise
            shown = f"train.model.kind={model_cfg.kind!r}" + (f", params {dict(model_cfg.params)}" if model_cfg.params else "")
            raise ConfigError(f"{e} (the trials with {shown})") from None
    return CheckedSweep(base, checked)
