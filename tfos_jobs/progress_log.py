"""A run's epoch lines: one JSON object per finished epoch, kept as `progress.jsonl` in the
model (or trial) directory.

The chief (or a sweep trial) reports each line over the control channel; the driver keeps them
here, shows them as they come, and writes the file through storage after each one, whole,
since object stores cannot append. A resumed run goes on from the lines already there.
"""
from __future__ import annotations

import json
import threading
from typing import Any

from tfos_jobs.storage import Storage

# A line holds the model's metrics (loss, auc, val_loss, ...) and these:
EPOCH, EPOCHS = "epoch", "epochs"  # this epoch (from 1) of how many
SECONDS = "seconds"  # the whole epoch, validation included
EVAL_SECONDS = "eval_seconds"  # the validation at its end
EXAMPLES_PER_SEC = "examples_per_sec"  # over the training steps' time only
TIME = "time"  # when it ended, seconds since the epoch
BOOKKEEPING = (EPOCH, EPOCHS, SECONDS, EVAL_SECONDS, EXAMPLES_PER_SEC, TIME)


def epoch_line(epoch: int, epochs: int, seconds: float, eval_seconds: float, examples_per_sec: float, time: float,
               metrics: dict[str, float]) -> dict[str, Any]:
    return {EPOCH: epoch, EPOCHS: epochs, SECONDS: seconds, EVAL_SECONDS: eval_seconds,
            EXAMPLES_PER_SEC: examples_per_sec, TIME: time, **metrics}


def metrics_of(line: dict[str, Any]) -> dict[str, Any]:
    """The model's metrics of a line, without the bookkeeping."""
    return {k: v for k, v in line.items() if k not in BOOKKEEPING}


def parse(text: str) -> list[dict[str, Any]]:
    """The complete lines of a progress file's text."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short
    return out


def read_progress(storage: Storage, path: str) -> list[dict[str, Any]]:
    """The lines of a progress file; none when it does not exist."""
    return parse(storage.read_text(path)) if storage.exists(path) else []


class ProgressLog:
    """The lines of one run, in memory and at `path` (`resume`: start from the lines there)."""

    def __init__(self, storage: Storage, path: str, *, resume: bool = False):
        self.storage, self.path = storage, path
        self._lock = threading.Lock()
        self._lines = read_progress(storage, path) if resume else []

    def add(self, line: dict[str, Any]) -> None:
        with self._lock:
            self._lines.append(dict(line))
            text = "".join(json.dumps(x) + "\n" for x in self._lines)
            self.storage.write_text(self.path, text)

    def lines(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._lines)
