"""Configuration: TOML in `conf/` -> frozen dataclasses, changed by typed settings (`Config.with_settings`) or, on the
command line only, by `--set key=value`.

One module per section (`[spark]`, `[sources.*]`, `[prepare]`, `[train]`, `[predict]`, `[tracking]`, `[serve_sql]`,
`[stream]`, the demo data sets, and the sweep file), each checking itself (`errors()`, as `FeatureSpec.errors` does);
`Config` adds what spans sections. Everything is checked here, before any Spark job starts; an error names the key (as a
dotted path, the way a setting names it) and what it allows."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from tfos_jobs.config.demo_data import FleetConfig, SyntheticConfig
from tfos_jobs.config.loading import apply_override, build, build_spec, is_url, read_config_file, read_toml, set_value
from tfos_jobs.config.predict import PredictConfig
from tfos_jobs.config.prepare import (ActivityConfig, AggregateConfig, LastValues, LookupConfig, PrepareConfig,
                                      SplitConfig)
from tfos_jobs.config.sources import FILE_FORMATS, SOURCE_FORMATS, SourceConfig
from tfos_jobs.config.spark import SparkConfig
from tfos_jobs.config.serve_sql import ServeSqlConfig
from tfos_jobs.config.stream import StreamConfig
from tfos_jobs.config.tracking import TrackingConfig
from tfos_jobs.config.train import ElasticConfig, ModelConfig, TrainConfig, parse_ports
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec

__all__ = [
    "ActivityConfig", "AggregateConfig", "Config", "ElasticConfig", "FILE_FORMATS", "FleetConfig", "LastValues", "LookupConfig", "ModelConfig", "PredictConfig",
    "PrepareConfig", "SOURCE_FORMATS", "ServeSqlConfig", "SourceConfig", "SparkConfig", "SplitConfig", "StreamConfig", "SyntheticConfig", "TrackingConfig",
    "TrainConfig", "apply_override", "from_dict", "is_url", "load", "parse_ports", "read_config_file", "read_toml",
    "set_value", "to_dict", "validate",
]


@dataclass(frozen=True)
class Config:
    features: FeatureSpec
    sources: Mapping[str, SourceConfig]
    prepare: PrepareConfig
    spark: SparkConfig = SparkConfig()
    synthetic: SyntheticConfig = SyntheticConfig()
    fleet: FleetConfig = FleetConfig()
    train: TrainConfig = TrainConfig()
    predict: PredictConfig = PredictConfig()
    tracking: TrackingConfig = TrackingConfig()
    serve_sql: ServeSqlConfig = ServeSqlConfig()
    stream: StreamConfig = StreamConfig()

    def errors(self) -> list[str]:
        """Every section's problems; those between sections are each section's to find."""
        errs = [e for name, src in self.sources.items() for e in src.errors(f"sources.{name}")]
        errs += self.spark.errors()
        errs += self.prepare.errors(self.sources, self.features)
        errs += self.train.errors(self.features)
        errs += self.predict.errors(self.sources)
        errs += self.synthetic.errors() + self.fleet.errors()
        errs += self.tracking.errors() + self.serve_sql.errors() + self.stream.errors()
        return errs

    def with_settings(self, settings: Mapping[str, object]) -> "Config":
        """This config with each dotted key of `settings` set to its typed value, e.g.
        `config.with_settings({"train.learning_rate": 0.01})`, checked as a file's values are."""
        tables = to_dict(self)
        for key, value in settings.items():
            set_value(tables, key, value)
        return from_dict(tables)


def load(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read a TOML file, apply the command line's `key=value` overrides, build and validate the config."""
    raw = read_config_file(path)
    for item in overrides:
        apply_override(raw, item)
    return from_dict(raw)


def from_dict(raw: Mapping[str, Any]) -> Config:
    raw = dict(raw)
    features = raw.pop("features", None)
    if not isinstance(features, Mapping) or not features:
        raise ConfigError("features: required table is missing (one [features.<name>] table per feature)")
    spec = build_spec(features)
    sources = raw.pop("sources", None)
    if not isinstance(sources, Mapping) or not sources:
        raise ConfigError("sources: required table is missing (one [sources.<name>] table per input)")
    built_sources = {name: build(SourceConfig, s, f"sources.{name}") for name, s in sources.items()}
    config = build(Config, {**raw, "features": spec, "sources": built_sources}, "")
    validate(config)
    return config


def validate(config: Config) -> None:
    """Raises one ConfigError listing every problem found."""
    errs = config.errors()
    if errs:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errs))


def to_dict(config: Config) -> dict[str, Any]:
    """The config as the tables of its TOML file: what `from_dict` reads back to an equal config."""
    out = dataclasses.asdict(dataclasses.replace(config, features=FeatureSpec(())))
    out["features"] = {f.name: {k: v for k, v in dataclasses.asdict(f).items() if k != "name"}
                       for f in config.features.features}
    return out
