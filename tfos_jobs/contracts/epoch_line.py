"""One finished epoch of a training run, in one form wherever it goes: the chief (or a sweep trial) reports it over the
control channel (`DriverLink.progress`); the driver keeps it in `progress.jsonl` (`progress_log`), prints it, hands it
to the sweep's pruner, observer and report and to MLflow, and ends with every line in metrics.json's `history`.

On the wire and in both files a line is one flat JSON object (`to_json`): the bookkeeping keys first, then the model's
metrics, as it has always been written, so files written before read."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from tfos_jobs.contracts.values import JsonObject

# An epoch line as JSON: one flat object of numbers (bookkeeping and metrics alike).
LineJson = dict[str, float]


@dataclass(frozen=True)
class EpochLine:
    epoch: int  # this epoch, from 1
    epochs: int  # of how many
    seconds: float  # the whole epoch, validation included
    eval_seconds: float  # the validation at its end
    examples_per_sec: float  # over the training steps' time only
    time: float  # when it ended, seconds since the epoch
    metrics: Mapping[str, float]  # the model's, by name: loss, auc, val_loss, ...

    def to_json(self) -> LineJson:
        return {**{k: getattr(self, k) for k in BOOKKEEPING}, **self.metrics}

    @classmethod
    def from_json(cls, data: JsonObject) -> "EpochLine":
        """Raises ValueError when `data` is no epoch line: a bookkeeping key missing (a line
        written before `eval_seconds` was kept reads it as 0.0), or a value that is no number."""
        data = {EVAL_SECONDS: 0.0, **data}
        numbers = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        missing = [k for k in BOOKKEEPING if k not in data]
        if missing or len(numbers) < len(data):
            wrong = missing + [k for k in data if k not in numbers]
            raise ValueError(f"not an epoch line: {', '.join(wrong)} missing or not a number")
        epoch, epochs = numbers[EPOCH], numbers[EPOCHS]
        if not isinstance(epoch, int) or not isinstance(epochs, int):
            raise ValueError(f"not an epoch line: epoch {epoch!r} of {epochs!r} are not counts")
        return cls(epoch=epoch, epochs=epochs, seconds=numbers[SECONDS], eval_seconds=numbers[EVAL_SECONDS],
                   examples_per_sec=numbers[EXAMPLES_PER_SEC], time=numbers[TIME],
                   metrics={k: v for k, v in numbers.items() if k not in BOOKKEEPING})


BOOKKEEPING = tuple(f.name for f in dataclasses.fields(EpochLine) if f.name != "metrics")  # the JSON keys, in order
EPOCH, EPOCHS, SECONDS, EVAL_SECONDS, EXAMPLES_PER_SEC, TIME = BOOKKEEPING
