"""One node job across a run's attempts, under multi_worker_mirrored (`Launch.rejoins`).

When an attempt fails (a node's executor lost, a peer gone, a hang), its node job is kept: the surviving tasks keep
their Python workers and the inputs on their disks, kill their node's process and run the next attempt's in a new one;
Spark runs the lost node's task again on another executor, and it joins the next attempt. Each attempt has its own run
id and state; `Generations` is the control channel's handler for the whole job: it hands each message to the state of
the attempt it names (control_channel.SENDER_RUN), refuses what an earlier attempt's processes still send, and answers
the tasks' NEXT.
"""
from __future__ import annotations

import threading
from typing import Any

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.driver.run_state import RunState, RunStopped
from tfos_jobs.contracts.node_args import Launch

FINISHED = (cc.RUN_OK, cc.RUN_PRUNED)  # an attempt that ended so ends its node job


class Generations:
    """The current attempt of a node job, which of its tasks were handed it, and which Spark
    task attempt ran each node in which of the job's attempts. The first attempt's launch is in
    every task's function, so every node's first task attempt has it already."""

    def __init__(self, launch: Launch, state: RunState, nodes: list[str]):
        self._lock = threading.Lock()
        self.launch, self.state = launch, state
        self._nodes = nodes
        self._handed: set[str] = set(nodes)
        self._number = 1  # the job's attempts so far
        self._ran: dict[tuple[int, int], int] = {(p, 0): 1 for p in range(len(nodes))}  # (partition, task attempt) -> last
        self._ended = False

    def begin(self, launch: Launch, state: RunState) -> None:
        """The next attempt: the tasks asking for one are handed `launch`."""
        with self._lock:
            self.launch, self.state, self._handed = launch, state, set()
            self._number += 1

    def counts(self, partition: int, task_attempt: int) -> bool:
        """Whether Spark's record of this failed task attempt concerns the current attempt: a
        task attempt that ran only earlier ones failed with them (Spark may record an executor's
        loss after the driver has moved on); one that never joined failed before it could."""
        with self._lock:
            last = self._ran.get((partition, task_attempt))
            return last is None or last == self._number

    def end(self) -> None:
        """No attempt follows: every task asking hears that the node job is over."""
        with self._lock:
            self._ended = True

    def handle(self, kind: str, message: dict[str, Any]) -> Any:
        if kind == cc.NEXT:
            return self._next(message)
        with self._lock:
            state = self.state
        run = message.get(cc.SENDER_RUN)
        if not isinstance(run, str) or not run:
            raise cc.ControlError(f"a {kind!r} message must name its attempt ({cc.SENDER_RUN!r})")
        if run == state.id:
            return state.handle(kind, message)
        if kind == cc.STATUS:
            return cc.RUN_FAILED  # an earlier attempt: it ended without finishing
        raise RunStopped(f"attempt {run} is over (the run goes on as attempt {state.id}): this node stops")

    def _next(self, message: dict[str, Any]) -> dict[str, Any]:
        node, after, task_attempt = message.get(cc.SENDER_NODE), message.get("after"), message.get("task_attempt")
        if node not in self._nodes or not isinstance(after, str) or not isinstance(task_attempt, int):
            raise cc.ControlError(f"{cc.NEXT!r} needs one of this job's nodes, the run id it ran last and its "
                                  "task's attempt number")
        with self._lock:
            status = self.state.done()
            if self._ended or status in FINISHED:
                return {"launch": None, "end": True}
            if status is None and node not in self._handed and after != self.state.id:
                self._handed.add(node)
                self._ran[(self._nodes.index(node), task_attempt)] = self._number
                self.state.joined(node, kept=bool(after))
                return {"launch": self.launch.to_json(), "end": False}
            return {"launch": None, "end": False}
