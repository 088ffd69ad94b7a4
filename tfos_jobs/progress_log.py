"""`progress.jsonl`: one JSON line per finished epoch, appended by the chief
(executor.training.epoch_progress), read by the driver's live output and by sweep trials."""
from __future__ import annotations

import json
from typing import Any


def read_progress(path: str) -> list[dict[str, Any]]:
    """The complete lines so far; none when the file does not exist yet."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line still being written
    return out


def append_progress(path: str, line: dict[str, Any]) -> None:
    """One finished epoch; a line is written in one call, so a reader sees it whole or not at all."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
