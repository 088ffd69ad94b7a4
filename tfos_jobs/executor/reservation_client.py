"""A TF node's side of the control channel (tfos_jobs.control_channel), put in place of
TensorFlowOnSpark's pickle-speaking `reservation.Client` while the node reserves its place.

TensorFlowOnSpark's node runtime (`TFSparkNode.run`) stays the launcher: it looks up
`reservation.Client` when it reserves, so the node wraps its run in `authenticated(secret)`.
The reservation it sends keeps only what cluster specs are built from: the node manager's
authkey and address never leave the node.
"""
from __future__ import annotations

import contextlib
import socket
import time
from typing import Any, Iterator

from tfos_jobs import control_channel as cc

CONNECT_SECONDS = 30.0
POLL_SECONDS = 0.2


class AuthenticatedClient:
    """TensorFlowOnSpark's `reservation.Client` interface over the authenticated channel."""

    secret: bytes = b""  # set per node run by `authenticated`

    def __init__(self, server_addr: Any):
        host, port = server_addr
        self.server = f"{host}:{port}"
        self.sock = socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS)
        hello = self._frame()
        if not hello.startswith(cc.HELLO) or len(hello) != len(cc.HELLO) + cc.NONCE_BYTES:
            raise cc.ControlError(f"{self.server} is not this package's reservation server")
        self.nonce = hello[len(cc.HELLO):]
        self.seq = 0

    def _frame(self) -> bytes:
        try:
            return cc.read_frame(self.sock)
        except (OSError, cc.ControlError) as e:
            raise cc.ControlError(f"reservation server {self.server}: {e}") from None

    def _request(self, kind: str, data: Any = None) -> Any:
        message = {"type": kind} if data is None else {"type": kind, "data": data}
        try:
            self.sock.sendall(cc.seal(self.secret, self.nonce, b"c", self.seq, message))
        except OSError as e:
            raise cc.ControlError(f"reservation server {self.server}: {e}") from None
        body = self._frame()
        if body.startswith(cc.REJECTED):
            reason = body[len(cc.REJECTED):].decode(errors="replace")
            raise cc.AuthenticationError(f"the reservation server at {self.server} rejected this node: {reason} "
                                         "(does the node hold this run's secret?)")
        reply = cc.open_body(self.secret, self.nonce, b"s", self.seq, body)
        self.seq += 1
        if not reply.get("ok"):
            raise cc.ControlError(f"reservation server {self.server} refused {kind!r}")
        return reply.get("data")

    def register(self, reservation: dict[str, Any]) -> str:
        self._request(cc.REGISTER, {k: reservation[k] for k in cc.NODE_FIELDS})
        return "OK"

    def get_reservations(self) -> list[dict[str, Any]]:
        return self._request(cc.CLUSTER)

    def await_reservations(self) -> list[dict[str, Any]]:
        while not self._request(cc.QUERY):
            time.sleep(POLL_SECONDS)
        return self.get_reservations()

    def request_stop(self) -> str:
        raise cc.ControlError("TF nodes do not stop the reservation server; the driver does")

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def authenticated(secret: bytes) -> Iterator[None]:
    """Within this block, TensorFlowOnSpark's node runtime reserves through the authenticated
    client with `secret`, and does not log the reservation (it holds the node manager's
    authkey). Each TF run has Python workers of its own, so nothing else in the process is
    affected."""
    import logging

    from tensorflowonspark import TFSparkNode, reservation

    client = type("RunClient", (AuthenticatedClient,), {"secret": secret})
    node_log = logging.getLogger(TFSparkNode.__name__)
    saved, level = reservation.Client, node_log.level
    reservation.Client = client
    node_log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        reservation.Client = saved
        node_log.setLevel(level)
