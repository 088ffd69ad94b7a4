"""The control server of a run whose nodes cannot reach this process (a Spark Connect client): the nodes connect to a
relay on the driver (`tfos.spark.cluster.Relay` in the package's jar), and this process takes their bytes and hands back
its replies with driver calls (`driver_calls.RELAY_EXCHANGE`), a long poll each.

The relay admits a connection only with the run's relay token (`control_channel.relay_token`)
and reads nothing past it: every message is authenticated and answered here, by the same
protocol as a direct connection (`control_server.Session`), so the rules are the same: no
unauthenticated input acted on, nothing decoded but verified JSON.
"""
from __future__ import annotations

import base64
import threading
import time
from typing import Any, Callable

from tfos_jobs import control_channel as cc
from tfos_jobs import driver_calls
from tfos_jobs.cluster.driver.control_server import IDLE_SECONDS, Endpoint, Handler, Rejected, Session

WAIT_MS = 500  # how long one exchange waits on the driver for the nodes' bytes
RETRIES = 5  # exchanges in a row that may fail (the client's connection to the driver) before the relay is given up


class RelayedControlServer(Endpoint):
    def __init__(self, spark: Any, secret: bytes, handler: Handler, *, ports: list[int] | None = None,
                 log: Callable[[str], None] = print):
        """`ports`: the relay's port on the driver is the first of them free (train.control_ports; [0]: any)."""
        super().__init__(secret, handler, log)
        self.spark, self.ports = spark, ports or [0]
        self.relay_id = ""
        self.failure: str | None = None  # why the relay stopped, when it did before `stop`
        self._sessions: dict[int, Session] = {}
        self._out: list[list[Any]] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> tuple[str, int]:
        opened = driver_calls.call(self.spark, driver_calls.RELAY_OPEN, token=cc.relay_token(self.secret).hex(),
                                   ports=self.ports)
        self.relay_id = str(opened["id"])
        self.address = (str(opened["host"]), int(opened["port"]))
        self._thread = threading.Thread(target=self._serve, name="tfos-control-relay", daemon=True)
        self._thread.start()
        return self.address

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(WAIT_MS / 1000 + 10)
        try:
            driver_calls.call(self.spark, driver_calls.RELAY_CLOSE, id=self.relay_id)
        except Exception:  # the driver closes a relay nobody polls anyway
            pass

    def _serve(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            out, self._out = self._out, []
            try:
                answer = driver_calls.call(self.spark, driver_calls.RELAY_EXCHANGE, id=self.relay_id, out=out,
                                           wait_ms=WAIT_MS)
                failures = 0
            except Exception as e:
                failures += 1
                self._out = out + self._out  # sent again with the next exchange
                if failures >= RETRIES:
                    self.failure = f"the driver's relay of the control channel failed: {e}"
                    self.log(f"control channel: {self.failure}")
                    return
                time.sleep(0.5 * failures)
                continue
            for kind, conn, data in answer["events"]:
                self._event(str(kind), int(conn), data)
            self._close_idle()

    def _event(self, kind: str, conn: int, data: Any) -> None:
        if kind == "open":
            session = self._sessions[conn] = Session(self, str(data))
            self._send(conn, session.hello())
        elif kind == "closed":
            self._sessions.pop(conn, None)
        elif kind == "data" and conn in self._sessions:
            try:
                replies = self._sessions[conn].receive(base64.b64decode(data))
            except Rejected as r:
                self._send(conn, r.frame)
                self._close(conn)
                return
            for reply in replies:
                self._send(conn, reply)

    def _send(self, conn: int, frame: bytes) -> None:
        self._out.append([conn, base64.b64encode(frame).decode("ascii")])

    def _close(self, conn: int) -> None:
        self._sessions.pop(conn, None)
        self._out.append([conn, None])

    def _close_idle(self) -> None:
        now = time.monotonic()
        for conn, session in list(self._sessions.items()):
            if now - session.last > IDLE_SECONDS:
                self._close(conn)
