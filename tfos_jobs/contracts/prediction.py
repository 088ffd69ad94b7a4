"""What `tfos predict` (and `api.predict`) reports, and the file beside its output that records
it when the output is files:

    <predict.output>/_prediction.json    `PredictionSummary` as JSON
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Mapping

SUMMARY_FILE = "_prediction.json"


@dataclass(frozen=True)
class PredictionSummary:
    """One scoring run: where the rows went (`output`, written with `mode`), how many, with which SavedModel (`model`),
    what serving filled in or did not know (`counts`, by `contracts.serving.count_key`), and how long it took."""

    output: str
    mode: str
    rows: int
    model: str
    counts: Mapping[str, int]
    seconds: float

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "PredictionSummary":
        return cls(**json.loads(text))


def summary_file(output: str) -> str:
    return f"{output.rstrip('/')}/{SUMMARY_FILE}"
