"""`tfos bench` (or `python -m benchmarks`): every stage measured against a baseline in the same run.

Kept in the source repository beside the package, not in it: the wheel ships without it, and
the CLI imports it only when `tfos bench` runs."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository: the report goes to ROOT/docs/benchmarks.md
