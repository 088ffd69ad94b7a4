"""One training attempt as the driver knows it: everything its TF nodes reported over the
control channel (`control_channel`), kept in memory.

The control server's thread feeds it (`handle`); the supervisor (`cluster.driver.supervise`) reads it. No file is shared
with the nodes: a cluster shares no disk. What a user may want to read while the run goes on (each node's record, a
failed node's traceback) is also handed to `keep`, which the train job writes into the model directory.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any, Callable, cast

from tfos_jobs import control_channel as cc

# (epoch from 1, the epoch's metrics by name) -> whether a lone node stops there (a sweep's pruner)
Judge = Callable[[int, dict[str, float]], bool]
from tfos_jobs.cluster.driver.transfers import FILE_MESSAGES, Transfers
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.metrics import ChiefResult, NodeRecord, chief_result
from tfos_jobs.progress_log import ProgressLog

LAUNCHED, RESERVED = "launched", "reserved"  # start-up steps the driver times itself; cc.FIRST_STEP the chief's


class RunStopped(Exception):
    """A report a node sent after the driver ended its run (the node hears this as an error)."""


REFUSED_ONCE_STOPPED = (cc.FIRST_STEP, cc.BEAT, cc.PROGRESS, cc.RESULT, cc.PUT, cc.PUBLISH, cc.SHOULD_PRUNE)


def new_run_id() -> str:
    """An attempt's id: sortable by its start, unique across attempts and sweeps."""
    return f"{time.strftime('%Y%m%d-%H%M%S-')}{uuid.uuid4().hex[:6]}"


class RunState:
    def __init__(self, run_id: str, required: int, progress: ProgressLog, transfers: Transfers,
                 keep: Callable[[str, str, str], None] | None = None, judge: Judge | None = None,
                 lone: bool = False):
        """`keep(kind, node, text)`: kind is cc.STARTED (the record, as JSON) or cc.FAILED (the traceback).
        `judge` answers a lone node's SHOULD_PRUNE (None: the run has no pruner). `lone`: one node
        that trains alone (no TF cluster, so no reservation): it counts as reserved once it has
        started, and it waits for a free executor slot as long as Spark makes it."""
        self.id, self.required, self.lone = run_id, required, lone
        self.progress, self.transfers, self.keep, self.judge = progress, transfers, keep, judge
        self._lock = threading.Lock()
        self._reservations: list[dict[str, Any]] = []
        self._times: dict[str, float] = {}
        self._last_beat = 0.0
        self._backup_at = 0.0  # when this attempt's chief last published its resume checkpoint
        self._steps = 0  # done, as the chief last said (across attempts)
        self._resumed_at: int | None = None  # the steps earlier attempts trained, as the chief said
        self._records: dict[str, NodeRecord] = {}
        self._errors: dict[str, str] = {}
        self._lost: list[str] = []
        self._replaced: list[str] = []  # lost parameter-server workers whose place a new task took
        self._joined: dict[str, bool] = {}  # node -> its task ran an earlier attempt (cluster.driver.generations)
        self._result: ChiefResult | None = None
        self._done: str | None = None
        self._stopped = False  # the driver ended the run: its nodes' reports are refused

    # -- the control server's side ---------------------------------------------------------------

    def handle(self, kind: str, message: dict[str, Any]) -> Any:
        if self._stopped and kind in REFUSED_ONCE_STOPPED:
            raise RunStopped("the driver ended this run (a failure elsewhere, a hang, or a stop): this node stops too")
        if kind in FILE_MESSAGES:
            reply = self.transfers.handle(kind, message)
            if kind == cc.PUBLISH and message.get("target") == cc.BACKUP:
                with self._lock:
                    self._backup_at = time.time()
            return reply
        if kind == cc.REGISTER:
            data = message.get("data")
            if not isinstance(data, dict) or not cc.valid_reservation(data):
                raise cc.ControlError(f"a reservation needs {', '.join(cc.NODE_FIELDS)} of the right types")
            with self._lock:
                self._reservations.append({k: data[k] for k in cc.NODE_FIELDS})
            return None
        if kind in (cc.QUERY, cc.CLUSTER, cc.STATUS):
            return {cc.QUERY: self.reserved, cc.CLUSTER: self.reservations, cc.STATUS: self.done}[kind]()
        if kind == cc.SHOULD_PRUNE:
            return self._should_prune(message)
        if kind == cc.PLACE:
            return self._place(message.get(cc.SENDER_NODE))
        node = message.get(cc.SENDER_NODE)
        if not isinstance(node, str) or not node:
            raise cc.ControlError(f"a {kind!r} report must name its node")
        if kind == cc.PROGRESS:
            line = message.get("line")
            if not isinstance(line, dict):
                raise cc.ControlError("a progress report needs its line")
            try:
                self.progress.add(EpochLine.from_json(line))
            except ValueError as e:
                raise cc.ControlError(f"a progress report needs its epoch line: {e}") from None
            return None
        kept = None  # what `keep` is handed of the report
        with self._lock:
            if kind == cc.STARTED:
                record = message.get("record")
                if not isinstance(record, dict) or not NodeRecord.__required_keys__ <= record.keys():
                    raise cc.ControlError("a started report needs the node's record (contracts.metrics.NodeRecord)")
                if node in self._lost and node not in self._replaced:
                    self._replaced.append(node)
                self._records[node], kept = cast(NodeRecord, record), json.dumps(record)
            elif kind == cc.FIRST_STEP:
                resumed_at = _count(message, "resumed_at")
                if cc.FIRST_STEP not in self._times:
                    self._times[cc.FIRST_STEP], self._resumed_at = time.time(), resumed_at
            elif kind == cc.BEAT:
                self._last_beat, self._steps = time.time(), max(self._steps, _count(message, "steps"))
            elif kind == cc.FAILED:
                self._errors[node] = kept = str(message.get("text", ""))
            elif kind == cc.LOST:
                if node not in self._lost:
                    self._lost.append(node)
            elif kind == cc.RESULT:
                try:
                    self._result = chief_result(message.get("result"))
                except ValueError as e:
                    raise cc.ControlError(f"a result report needs the chief's result: {e}") from None
            elif kind == cc.DONE:
                self._done = self._done or str(message.get("status"))
            else:
                raise cc.ControlError(f"unknown message type {kind!r}")
        if self.keep is not None and kept is not None:
            self.keep(kind, node, kept)
        return None

    def _should_prune(self, message: dict[str, Any]) -> bool:
        epoch, metrics = message.get("epoch"), message.get("metrics")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
            raise cc.ControlError(f"should_prune needs an epoch from 1, got {epoch!r}")
        if not isinstance(metrics, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values()):
            raise cc.ControlError("should_prune needs the epoch's metrics as numbers by name")
        return bool(self.judge(epoch, {str(k): float(v) for k, v in metrics.items()})) if self.judge else False

    # -- the driver's side -----------------------------------------------------------------------

    def reservations(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._reservations]

    def reserved(self) -> bool:
        return self.remaining() == 0

    def remaining(self) -> int:
        with self._lock:
            return max(0, self.required - len(self._records if self.lone else self._reservations))

    def mark(self, step: str) -> None:
        with self._lock:
            self._times[step] = time.time()

    def startup(self) -> dict[str, float]:
        """Seconds from starting the control server (executors already there) to every node
        reserved, and to the chief's first finished step."""
        with self._lock:
            launched = self._times.get(LAUNCHED)
            if launched is None:
                return {}
            return {key: round(self._times[step] - launched, 3)
                    for step, key in ((RESERVED, "to_reserved_seconds"), (cc.FIRST_STEP, "to_first_step_seconds"))
                    if step in self._times}

    def last_beat(self) -> float:
        """When the chief last reported finished steps; 0 before the first."""
        with self._lock:
            return self._last_beat

    def backup_published(self) -> float:
        """When this attempt last published a resume checkpoint (0.0: not yet)."""
        with self._lock:
            return self._backup_at

    def steps(self) -> int:
        """The steps done as of the chief's last beat (across attempts): how far this attempt got."""
        with self._lock:
            return self._steps

    def first_step(self) -> tuple[float, int] | None:
        """When the chief's first step finished, and the steps earlier attempts trained before it."""
        with self._lock:
            at = self._times.get(cc.FIRST_STEP)
            return None if at is None else (at, self._resumed_at or 0)

    def records(self) -> dict[str, NodeRecord]:
        """Node name -> what it was given, in name order."""
        with self._lock:
            return dict(sorted(self._records.items()))

    def errors(self) -> dict[str, str]:
        """Node name -> the traceback it reported, in name order."""
        with self._lock:
            return dict(sorted(self._errors.items()))

    def task_failed(self, node: str, text: str) -> None:
        """What Spark recorded for a node's failed task, when the node itself reported nothing."""
        with self._lock:
            if node in self._errors:
                return
            self._errors[node] = text
        if self.keep is not None:
            self.keep(cc.FAILED, node, text)

    def joined(self, node: str, kept: bool) -> None:
        """`node`'s task took this attempt after an earlier one (`kept`), or as a new task."""
        with self._lock:
            self._joined[node] = kept

    def tasks(self) -> tuple[list[str], list[str]]:
        """(nodes whose task ran an earlier attempt before this one, nodes on a new task: those
        that joined as one, and those that started without joining, in a new node job)."""
        with self._lock:
            kept = {n for n, k in self._joined.items() if k}
            return sorted(kept), sorted((set(self._joined) | set(self._records)) - kept)

    def lost(self) -> list[str]:
        with self._lock:
            return sorted(self._lost)

    def replaced(self) -> list[str]:
        """Lost parameter-server workers whose place a new task has taken (it started)."""
        with self._lock:
            return sorted(self._replaced)

    def _place(self, node: object) -> dict[str, Any] | None:
        """Where lost worker `node` ran in the TF cluster, for the task that takes its place."""
        with self._lock:
            record = self._records.get(node) if isinstance(node, str) and node in self._lost else None
            if record is None or self._done is not None or self._stopped:
                return None
            return {"cluster": record["cluster"], "role": record["role"], "index": record["index"]}

    def result(self) -> ChiefResult | None:
        with self._lock:
            return self._result

    def mark_done(self, status: str) -> None:
        """The driver ends the run: serving nodes hear `status`, training nodes are refused their next report (a
        heartbeat at most a few seconds away) and stop, and nothing they report after this counts."""
        with self._lock:
            if self._done is None:
                self._done, self._stopped = status, True

    def done(self) -> str | None:
        with self._lock:
            return self._done


def _count(message: dict[str, Any], key: str) -> int:
    value = message.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise cc.ControlError(f"{key} must be a count of steps, got {value!r}")
    return value
