"""A run's epoch lines (`contracts.epoch_line.EpochLine`): one JSON object per finished epoch,
kept as `progress.jsonl` in the model (or trial) directory.

The chief (or a sweep trial) reports each line over the control channel; the driver keeps them
here, shows them as they come, and writes the file through storage after each one, whole,
since object stores cannot append. A resumed run goes on from the lines already there.
"""
from __future__ import annotations

import json
import threading

from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.storage import Storage


def parse(text: str) -> list[EpochLine]:
    """The complete lines of a progress file's text."""
    out = []
    for line in text.splitlines():
        try:
            out.append(EpochLine.from_json(json.loads(line)))
        except (json.JSONDecodeError, ValueError, TypeError):
            break  # a line cut short
    return out


def read_progress(storage: Storage, path: str) -> list[EpochLine]:
    """The lines of a progress file; none when it does not exist."""
    return parse(storage.read_text(path)) if storage.exists(path) else []


class ProgressLog:
    """The lines of one run, in memory and at `path` (`resume`: start from the lines there)."""

    def __init__(self, storage: Storage, path: str, *, resume: bool = False):
        self.storage, self.path = storage, path
        self._lock = threading.Lock()
        self._lines = read_progress(storage, path) if resume else []

    def add(self, line: EpochLine) -> None:
        with self._lock:
            self._lines.append(line)
            self.storage.write_text(self.path, "".join(json.dumps(x.to_json()) + "\n" for x in self._lines))

    def lines(self) -> list[EpochLine]:
        with self._lock:
            return list(self._lines)
