"""The demos (`tfos demo`, `tfos demo-stream`, `tfos demo-warehouse`): the embedded data, then
the jobs on it through the Python API, printing each step and checking what it found; each
starts its session from the config when it needs one.

pipeline   the census pipeline (rows, wide & deep) or the sensor fleet's (windows, autoencoder)
stream     the fleet's readings replayed into Kafka, scored as they arrive, compared with batch
warehouse  the census tables served from PostgreSQL and Hive, prepared from there, compared
"""
from __future__ import annotations

from tfos_jobs.api.demos.pipeline import demo
from tfos_jobs.api.demos.stream import demo_stream
from tfos_jobs.api.demos.warehouse import demo_warehouse

__all__ = ["demo", "demo_stream", "demo_warehouse"]
