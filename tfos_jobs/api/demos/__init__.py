"""The demos (`tfos demo`, `tfos demo-stream`, `tfos demo-warehouse`): the embedded data, then
the jobs on it through the Python API, printing each step and checking what it found; each
starts its session from the config when it needs one.

pipeline   the census pipeline (rows, wide & deep) or the sensor fleet's (windows, autoencoder)
stream     the fleet's readings replayed into Kafka, scored as they arrive, compared with batch
warehouse  the census tables served from PostgreSQL and Hive, prepared from there, compared
"""
from __future__ import annotations

from tfos_jobs.config import Config


def demo(*, config: Config) -> None:
    """Generate the embedded data, then prepare, train, query, predict (and evaluate, for sensor
    windows) on it, printing each step and where it wrote (`tfos demo`, docs/demo.md).

    Returns
    -------
    None : the results are where `config` says (a step that fails raises its own error).

    Stable. Example: ``api.demo(config=config.load("conf/census.toml"))``"""
    from tfos_jobs.api.demos import pipeline

    pipeline.run(config)


def demo_stream(*, config: Config) -> bool:
    """Replay the fleet's last readings into the Kafka topic of `[stream]` while `stream` scores
    them, then score them in batch (after the fleet pipeline, without a model): `tfos demo-stream`.

    Returns
    -------
    bool : the stream scored the windows batch did, with the same anomaly ROC AUC.

    Raises
    ------
    ConfigError : `config` is not of sensor windows with a key.

    Stable. Example: ``api.demo_stream(config=config.load("conf/fleet.toml"))``"""
    from tfos_jobs.api.demos import stream

    return stream.run(config)


def demo_warehouse(*, config: Config) -> bool:
    """Load the census tables into a local PostgreSQL (removed at the end) and Hive tables, and
    prepare from there and from their Parquet files: `tfos demo-warehouse` (docs/demo.md).

    Returns
    -------
    bool : both datasets hold the same bytes.

    Raises
    ------
    ConfigError : `config` has not one jdbc source, on a free port of this machine.

    Stable. Example: ``api.demo_warehouse(config=config.load("conf/census_warehouse.toml"))``"""
    from tfos_jobs.api.demos import warehouse

    return warehouse.run(config)
