"""The embedded demo data for sequence anomaly detection: raw sensor readings from a seeded fleet of machines.

Every asset has eight sensors in their own units, all driven by the same few smooth latent signals (a daily-ish cycle,
an operating load that switches between levels, slow wear) through fleet-wide mixing weights, so normal behaviour is
smooth, strongly correlated across sensors and predictable. On top come the flaws of real telemetry (short and long
sensor dropouts as nulls, rows missing altogether) and rare anomalies of four kinds: spikes, drifts, stuck sensors and a
sensor that stops following the others. The anomalies go to a separate table, as they would from maintenance logs; the
sensor files carry no label.

Each asset is generated from its own seed, so the data is identical whatever order or process generates it. Most assets
are written as Parquet, every `csv_every`-th as CSV, so a pipeline has to read both."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tfos_jobs.config import Config
from tfos_jobs.data.columns import ANOMALY_END, ANOMALY_KIND, ANOMALY_SENSOR, ANOMALY_START
from tfos_jobs.storage import Storage, named

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Session = Callable[[], "SparkSession"]  # a command's session, started when first needed

SENSORS: tuple[str, ...] = ("temperature", "pressure", "vibration", "rpm", "voltage", "current", "flow", "humidity")
ASSET = "asset_id"
TIME = "ts"
START = "2026-01-01T00:00:00"  # first timestamp, naive, meant as UTC
ANOMALY_KINDS = ("spike", "drift", "stuck", "correlation_break")
ANOMALY_COLUMNS = (ASSET, ANOMALY_START, ANOMALY_END, ANOMALY_KIND, ANOMALY_SENSOR)
SENSORS_DIR = "sensors"  # under the output: one file per asset
ANOMALIES_DIR = "anomalies"  # under the output: anomalies.parquet, every asset's intervals

# sensor: (fleet-typical level, typical normal std), in the sensor's own units
UNITS = {
    "temperature": (75.0, 5.0), "pressure": (4.5, 0.5), "vibration": (2.0, 0.4), "rpm": (2000.0, 350.0),
    "voltage": (230.0, 3.0), "current": (25.0, 5.0), "flow": (100.0, 15.0), "humidity": (45.0, 6.0),
}
# how each sensor mixes the latent drivers (cycle, load, wear), shared by the fleet; mostly load,
# so the sensors move together and one that stops doing so stands out
MIXING = np.array([
    [0.55, 0.75, 0.35],    # temperature
    [0.25, 0.95, 0.10],    # pressure
    [0.15, 0.80, 0.60],    # vibration: grows with wear
    [0.10, 1.00, 0.00],    # rpm
    [-0.55, -0.70, 0.00],  # voltage: sags under load
    [0.30, 0.95, 0.25],    # current
    [0.35, 0.90, -0.35],   # flow: drops with wear (clogging)
    [-0.90, 0.35, 0.00],   # humidity: mostly the daily cycle
])
MIXING = MIXING / np.linalg.norm(MIXING, axis=1, keepdims=True)
ASSET_SPREAD = 0.02  # relative per-asset perturbation of weights, scales and offsets
OPERATING_POINT = 0.4  # std of an asset's own shift of the drivers: assets differ coherently
NOISE = 0.025  # white noise, as a share of each sensor's normal std

REFERENCE_STEPS = 20_000  # dropout and gap counts below are per this many steps
SHORT_DROPOUTS, LONG_DROPOUTS = (3.0, 1, 3), (1.0, 10, 30)  # (expected count, min length, max length)
SHORT_GAPS, LONG_GAPS = (2.0, 1, 3), (1.0, 20, 60)
ANOMALY_EVERY = 1_500  # steps per anomaly, on average
CLEARANCE = 64  # steps kept clear between an anomaly and another anomaly, a gap or a dropout
LOAD_RAMP = 20  # steps a load transition takes

SENSOR_SCHEMA = pa.schema([(ASSET, pa.string()), (TIME, pa.timestamp("us"))] + [(s, pa.float64()) for s in SENSORS])
ANOMALY_SCHEMA = pa.schema([
    (ASSET, pa.string()), (ANOMALY_START, pa.timestamp("us")), (ANOMALY_END, pa.timestamp("us")),
    (ANOMALY_KIND, pa.string()), (ANOMALY_SENSOR, pa.string()),
])
CSV_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def asset_id(index: int) -> str:
    return f"asset-{index:04d}"


def _drivers(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The latent (cycle, load, wear) signals as an (n, 3) array, each of about unit scale, and the
    steps where load transitions begin (the places where a stuck sensor shows most)."""
    t = np.arange(n, dtype=float)
    period = rng.uniform(200, 800)
    phase, phase2 = rng.uniform(0, 2 * np.pi, 2)
    harmonic = rng.uniform(0.1, 0.3)
    cycle = np.sqrt(2) * (np.sin(2 * np.pi * t / period + phase) + harmonic * np.sin(4 * np.pi * t / period + phase2))

    count = int(rng.integers(2, 4))
    levels = np.linspace(-1.2, 1.2, count) + rng.uniform(-0.15, 0.15, count)
    current = int(rng.integers(count))
    knots_t, knots_v, switches = [0.0], [levels[current]], []
    at = rng.uniform(0, 3000)  # the series starts part-way through a regime
    while at + LOAD_RAMP < n:
        following = int(rng.choice([k for k in range(count) if k != current]))
        knots_t += [at, at + LOAD_RAMP]
        knots_v += [levels[current], levels[following]]
        switches.append(int(np.ceil(at)))
        current = following
        at += rng.uniform(500, 3000)
    load = np.interp(t, knots_t, knots_v)

    wear = rng.uniform(0.2, 0.6) * (t / max(n - 1, 1)) ** rng.uniform(1.0, 2.0)
    return np.column_stack([cycle, load, wear]), np.asarray(switches, dtype=np.int64)


def _runs(rng: np.random.Generator, n: int, spec: tuple[float, int, int]) -> list[tuple[int, int]]:
    """(start, length) of randomly placed runs: about `expected` per REFERENCE_STEPS steps."""
    expected, shortest, longest = spec
    count = int(rng.poisson(expected * n / REFERENCE_STEPS))
    lengths = np.minimum(rng.integers(shortest, longest + 1, count), n)
    starts = rng.integers(0, n - lengths + 1)
    return [(int(s), int(length)) for s, length in zip(starts, lengths)]


def _clear(busy: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Which candidate intervals [start, start+length) have CLEARANCE steps free on both sides."""
    total = np.concatenate([[0], np.cumsum(busy)])
    lo = np.clip(starts - CLEARANCE, 0, len(busy))
    hi = np.clip(starts + length + CLEARANCE, 0, len(busy))
    return total[hi] == total[lo]


def _stuck_start(candidates: np.ndarray, length: int, signal: np.ndarray, std: float) -> int:
    """The candidate after which the true signal strays furthest from its frozen value: a stuck
    sensor is only visibly wrong while the process moves."""
    offsets = np.arange(length)
    paths = signal[candidates[:, None] + offsets[None, :]]
    strayed = np.abs(paths - paths[:, :1]) / std
    return int(candidates[np.argmax(np.quantile(strayed, 0.3, axis=1))])


def _wave(rng: np.random.Generator, length: int) -> np.ndarray:
    """A smooth signal unrelated to the drivers, 0 at the start and 4-5 (normal std) at its peak."""
    k = np.arange(length, dtype=float)
    slow, fast = rng.uniform(30, 80), rng.uniform(12, 30)
    phase = rng.uniform(0, 2 * np.pi)
    wave = rng.choice([-1.0, 1.0]) * np.sin(2 * np.pi * k / slow)
    wave += 0.4 * (np.sin(2 * np.pi * k / fast + phase) - np.sin(phase))
    return wave * rng.uniform(4, 5) / max(float(np.abs(wave).max()), 1e-9)


def _anomalous(rng: np.random.Generator, kind: str, readings: np.ndarray, true_start: float, std: float) -> np.ndarray:
    """The readings of one sensor over an anomaly interval, given its normal readings there."""
    length = len(readings)
    sign = rng.choice([-1.0, 1.0])
    if kind == "spike":
        return readings + sign * rng.uniform(6, 10, length) * std
    if kind == "drift":
        ramp = int(rng.integers(5, 11))  # short, so the level shift shows from its first steps
        return readings + sign * rng.uniform(4, 6) * np.minimum(1.0, np.arange(1, length + 1) / ramp) * std
    if kind == "stuck":
        return np.full(length, readings[0])
    noise = NOISE * std * rng.standard_normal(length)
    return true_start + _wave(rng, length) * std + noise  # correlation_break: decoupled from the drivers


def _anomaly_frame(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(ANOMALY_COLUMNS))
    for column in (ASSET, ANOMALY_KIND, ANOMALY_SENSOR):
        frame[column] = frame[column].astype(object)
    for column in (ANOMALY_START, ANOMALY_END):
        frame[column] = frame[column].astype("datetime64[us]")
    return frame


def asset_frame(index: int, steps: int, seed: int, step_seconds: int = 60) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The readings of one asset (`steps` grid points minus gaps) and its anomaly intervals (inclusive
    ends); depends only on the arguments, through an RNG seeded by (seed, index)."""
    if steps < 1 or step_seconds < 1:
        raise ValueError(f"steps and step_seconds must be positive, got {steps} and {step_seconds}")
    rng = np.random.default_rng([seed, index])
    name = asset_id(index)
    n, width = steps, len(SENSORS)

    drivers, switches = _drivers(rng, n)
    weights = MIXING * (1 + ASSET_SPREAD * rng.standard_normal(MIXING.shape))
    drivers = drivers + OPERATING_POINT * rng.standard_normal(3)
    level = np.array([UNITS[s][0] for s in SENSORS])
    unit = np.array([UNITS[s][1] for s in SENSORS])
    offset = level + unit * ASSET_SPREAD * rng.standard_normal(width)
    scale = unit * (1 + ASSET_SPREAD * rng.standard_normal(width))
    clean = offset + scale * (drivers @ weights.T)
    std = np.maximum(clean.std(axis=0), 1e-3 * unit)  # each sensor's normal std: the unit of anomalies
    values = clean + NOISE * std * rng.standard_normal((n, width))

    busy = np.zeros(n, dtype=bool)
    dropouts = []
    for spec in (SHORT_DROPOUTS, LONG_DROPOUTS):
        for start, length in _runs(rng, n, spec):
            dropouts.append((start, length, int(rng.integers(width))))
            busy[start:start + length] = True
    gaps = _runs(rng, n, SHORT_GAPS) + _runs(rng, n, LONG_GAPS)
    for start, length in gaps:
        busy[start:start + length] = True

    offsets = np.arange(n, dtype=np.int64) * step_seconds * 1_000_000
    grid = np.datetime64(START, "us") + offsets.astype("timedelta64[us]")
    anomalies = []
    first = int(rng.integers(len(ANOMALY_KINDS)))
    for j in range(int(rng.poisson(n / ANOMALY_EVERY))):
        kind = ANOMALY_KINDS[(first + j) % len(ANOMALY_KINDS)]
        sensor = int(rng.integers(width))
        length = int(rng.integers(1, 6)) if kind == "spike" else int(rng.integers(60, 201))
        if length > n:
            continue
        candidates = rng.integers(0, n - length + 1, 256)
        if kind == "stuck":
            aligned = (switches[:, None] - np.arange(11)[None, :]).ravel()
            candidates = np.concatenate([candidates, aligned[(aligned >= 0) & (aligned <= n - length)]])
        candidates = candidates[_clear(busy, candidates, length)]
        if len(candidates) == 0:
            continue  # no room left: fewer anomalies rather than overlapping ones
        if kind == "stuck":
            start = _stuck_start(candidates, length, clean[:, sensor], std[sensor])
        else:
            start = int(candidates[0])
        values[start:start + length, sensor] = _anomalous(
            rng, kind, values[start:start + length, sensor], clean[start, sensor], std[sensor])
        busy[start:start + length] = True
        anomalies.append((name, grid[start], grid[start + length - 1], kind, SENSORS[sensor]))

    for start, length, sensor in dropouts:
        values[start:start + length, sensor] = np.nan
    keep = np.ones(n, dtype=bool)
    for start, length in gaps:
        keep[start:start + length] = False

    frame = pd.DataFrame({ASSET: np.full(int(keep.sum()), name, dtype=object), TIME: grid[keep]})
    for k, column in enumerate(SENSORS):
        frame[column] = values[keep, k]
    anomaly_rows = sorted(anomalies, key=lambda row: row[1])
    return frame, _anomaly_frame(anomaly_rows)


def generate(output: str, assets: int, steps: int, seed: int, step_seconds: int = 60,
             csv_every: int = 10) -> dict[str, int]:
    """Write one file per asset under `<output>/sensors` (Parquet, or CSV for every `csv_every`-th
    asset; 0 for none) and all anomaly intervals to `<output>/anomalies/anomalies.parquet`."""
    root = Path(output)
    sensors, anomalies_dir = root / SENSORS_DIR, root / ANOMALIES_DIR
    for directory in (sensors, anomalies_dir):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    rows, csv_assets, intervals = 0, 0, []
    for index in range(assets):
        frame, anomalies = asset_frame(index, steps, seed, step_seconds)
        if csv_every > 0 and index % csv_every == csv_every - 1:
            frame.to_csv(sensors / f"{asset_id(index)}.csv", index=False, date_format=CSV_TIME_FORMAT)
            csv_assets += 1
        else:
            table = pa.Table.from_pandas(frame, schema=SENSOR_SCHEMA, preserve_index=False)
            pq.write_table(table, sensors / f"{asset_id(index)}.parquet")
        rows += len(frame)
        intervals.append(anomalies)
    intervals = [frame for frame in intervals if len(frame)]
    anomalies = pd.concat(intervals, ignore_index=True) if intervals else _anomaly_frame([])
    table = pa.Table.from_pandas(anomalies, schema=ANOMALY_SCHEMA, preserve_index=False)
    pq.write_table(table, anomalies_dir / "anomalies.parquet")
    return {"assets": assets, "rows": rows, "anomalies": len(anomalies), "csv_assets": csv_assets}


def write(config: Config, session: Session) -> None:
    """The fleet `config.fleet` describes, at `fleet.output`. The files are written on this machine; an output on
    another filesystem (HDFS, S3, ...), or any output of a Spark Connect client (its disk is not the cluster's),
    receives them whole afterwards."""
    from tfos_jobs.session_builder import remote_url

    fl = config.fleet
    remote = ("://" in fl.output and not fl.output.startswith("file:")) or bool(remote_url(config.spark))
    with tempfile.TemporaryDirectory(prefix="tfos-fleet-") as tmp:
        local = tmp if remote else fl.output
        counts = generate(local, fl.assets, fl.steps, fl.seed, step_seconds=config.features.time.step_seconds,
                                csv_every=fl.csv_every)
        if remote:
            storage = Storage(session())
            with named("fleet.output", fl.output):
                for part in (SENSORS_DIR, ANOMALIES_DIR):
                    storage.replace_dir(os.path.join(tmp, part), f"{storage.qualify(fl.output)}/{part}")
    print(f"wrote {fl.output}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
