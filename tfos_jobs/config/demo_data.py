"""`[synthetic]` and `[fleet]`: the embedded data sets `tfos generate` and `tfos demo` write."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class SyntheticConfig:
    """The embedded census-like data set: `people`, `regions` and `events` tables."""

    output: str = "demo-output/raw"
    people: int = 100_000
    events_per_person: float = 20.0
    seed: int = 42
    as_of: str = "2026-01-01"

    def errors(self) -> list[str]:
        errs = []
        if self.people < 1:
            errs.append(f"synthetic.people: must be >= 1, got {self.people}")
        if self.events_per_person < 0:
            errs.append(f"synthetic.events_per_person: must be >= 0, got {self.events_per_person}")
        try:
            dt.date.fromisoformat(self.as_of)
        except ValueError:
            errs.append(f"synthetic.as_of: {self.as_of!r} is not an ISO date (YYYY-MM-DD)")
        return errs


@dataclass(frozen=True)
class FleetConfig:
    """The embedded sensor fleet: one file per asset under `<output>/sensors` (every
    `csv_every`-th asset as CSV, the rest Parquet) and the true anomaly intervals, which no
    model sees, under `<output>/anomalies`. The time step is the time feature's."""

    output: str = "demo-output/fleet/raw"
    assets: int = 200
    steps: int = 20_000
    seed: int = 42
    csv_every: int = 10

    def errors(self) -> list[str]:
        return [f"fleet.{key}: must be >= 1, got {getattr(self, key)}" for key in ("assets", "steps", "csv_every")
                if getattr(self, key) < 1]
