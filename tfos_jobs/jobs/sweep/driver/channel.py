"""The sweep's side of the control channel: each running trial's progress, its traceback, the
files it publishes into its directory, and its questions to the pruner."""
from __future__ import annotations

import threading
from typing import Any, Callable

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.sweep_dir import TrialDir
from tfos_jobs.cluster.driver.transfers import FILE_MESSAGES, Transfers, model_dir_targets
from tfos_jobs.progress_log import ProgressLog
from tfos_jobs.storage import Storage

# (trial number, epoch from 1, the metric's value or None) -> whether the trial stops there
Judge = Callable[[int, int, float | None], bool]


class Trials:
    """The running trials' messages; `judge` answers SHOULD_PRUNE (the sweep's study)."""

    def __init__(self, storage: Storage, judge: Judge):
        self.storage, self.judge = storage, judge
        self._lock = threading.Lock()
        self._progress: dict[int, ProgressLog] = {}
        self._transfers: dict[int, Transfers] = {}
        self._errors: dict[int, str] = {}

    def add(self, number: int, directory: TrialDir, progress: ProgressLog) -> None:
        with self._lock:
            self._progress[number] = progress
            old = self._transfers.pop(number, None)
            self._transfers[number] = Transfers(self.storage, model_dir_targets(directory))
            self._errors.pop(number, None)
        if old is not None:
            old.close()

    def error(self, number: int) -> str | None:
        with self._lock:
            return self._errors.get(number)

    def handle(self, kind: str, message: dict[str, Any]) -> Any:
        number = message.get(cc.SENDER_TRIAL)
        with self._lock:
            if number not in self._transfers:
                raise cc.ControlError(f"no running trial {number!r}")
            transfers, progress = self._transfers[number], self._progress[number]
        if kind in FILE_MESSAGES:
            return transfers.handle(kind, message)
        if kind == cc.PROGRESS:
            line = message.get("line")
            if not isinstance(line, dict):
                raise cc.ControlError("a progress report needs its line")
            progress.add(line)
            return None
        if kind == cc.SHOULD_PRUNE:
            epoch, value = message.get("epoch"), message.get("value")
            if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
                raise cc.ControlError(f"should_prune needs an epoch from 1, got {epoch!r}")
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                raise cc.ControlError(f"should_prune needs a number or null as value, got {value!r}")
            return bool(self.judge(number, epoch, None if value is None else float(value)))
        if kind == cc.FAILED:
            with self._lock:
                self._errors[number] = str(message.get("text", ""))
            return None
        if kind in (cc.FIRST_STEP, cc.BEAT, cc.RESULT):
            return None  # a trial's own result comes back with its task
        raise cc.ControlError(f"unknown message type {kind!r} from a trial")

    def close(self) -> None:
        with self._lock:
            for transfers in self._transfers.values():
                transfers.close()
