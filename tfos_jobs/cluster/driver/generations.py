"""One node job across a run's attempts, under multi_worker_mirrored (`Launch.rejoins`).

When an attempt fails (a node's executor lost, a peer gone, a hang), its node job is kept: the
surviving tasks keep their Python workers and the inputs on their disks, kill their node's
process and run the next attempt's in a new one; Spark runs the lost node's task again on
another executor, and it joins the next attempt. Each attempt has its own run id and state;
`Generations` is the control channel's handler for the whole job: it hands each message to the
state of the attempt it names (control_channel.SENDER_RUN), refuses what an earlier attempt's
processes still send, and answers the tasks' NEXT.
"""
from __future__ import annotations

import threading
from typing import Any

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.driver.run_state import RunState, RunStopped
from tfos_jobs.contracts.node_args import Launch

FINISHED = (cc.RUN_OK, cc.RUN_PRUNED)  # an attempt that ended so ends its node job


class Generations:
    """The current attempt of a node job, and which of its tasks were handed it. The first
    attempt's launch is in every task's function, so every node has it already."""

    def __init__(self, launch: Launch, state: RunState, nodes: list[str]):
        self._lock = threading.Lock()
        self.launch, self.state = launch, state
        self._nodes = frozenset(nodes)
        self._handed: set[str] = set(nodes)
        self._ended = False

    def begin(self, launch: Launch, state: RunState) -> None:
        """The next attempt: the tasks asking for one are handed `launch`."""
        with self._lock:
            self.launch, self.state, self._handed = launch, state, set()

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
        node, after = message.get(cc.SENDER_NODE), message.get("after")
        if node not in self._nodes or not isinstance(after, str):
            raise cc.ControlError(f"{cc.NEXT!r} needs one of this job's nodes and the run id it ran last")
        with self._lock:
            status = self.state.done()
            if self._ended or status in FINISHED:
                return {"launch": None, "end": True}
            if status is None and node not in self._handed and after != self.state.id:
                self._handed.add(node)
                self.state.joined(node, kept=bool(after))
                return {"launch": self.launch.to_json(), "end": False}
            return {"launch": None, "end": False}
