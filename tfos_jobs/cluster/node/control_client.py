"""The executor's side of the control channel (`tfos_jobs.control_channel`): a TF node's or a
sweep trial's only line to the driver.

`ControlClient` speaks the channel; `DriverLink` is what node code calls (report progress, publish a directory, fetch
the resume state, ...). A node of a TF cluster reserves its place through the client (`reserve`, called by
`cluster.node.tfos_cluster`): the reservation keeps only what cluster specs are built from.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Mapping

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.metrics import ChiefResult, NodeRecord

CONNECT_SECONDS = 30.0
POLL_SECONDS = 0.2


class ControlClient:
    """One authenticated connection to the driver's control server, opened again once when the server closed it (it
    closes connections idle for a while). `relayed`: the address is the driver's relay to a Spark Connect client's
    server (`control_channel.RELAY`). `run`: the attempt every message speaks for (control_channel.SENDER_RUN; "" for
    none: a node's task between attempts)."""

    def __init__(self, server_addr: Any, secret: bytes, *, relayed: bool = False, run: str = ""):
        host, port = server_addr
        self.address, self.secret, self.relayed, self.run = (host, int(port)), secret, relayed, run
        self.server = f"{host}:{port}" + (" (the driver's relay)" if relayed else "")
        self._lock = threading.Lock()  # callbacks and the node's own thread share the connection
        self.sock: socket.socket | None = None
        self._connect()

    def _connect(self) -> None:
        try:
            self.sock = socket.create_connection(self.address, timeout=CONNECT_SECONDS)
            if self.relayed:
                self.sock.sendall(cc.frame(cc.RELAY + cc.relay_token(self.secret)))
        except OSError as e:
            raise cc.ControlError(f"cannot reach the driver's control server at {self.server}: {e}") from None
        hello = self._frame()
        if not hello.startswith(cc.HELLO) or len(hello) != len(cc.HELLO) + cc.NONCE_BYTES:
            raise cc.ControlError(f"{self.server} is not this package's control server")
        self.nonce = hello[len(cc.HELLO):]
        self.seq = 0

    def _socket(self) -> socket.socket:
        if self.sock is None:  # closed, and not opened again
            raise RuntimeError(f"not connected to the control server at {self.server}")
        return self.sock

    def _frame(self) -> bytes:
        try:
            return cc.read_frame(self._socket())
        except (OSError, cc.ControlError) as e:
            raise cc.ControlError(f"control server {self.server}: {e}") from None

    def request(self, kind: str, data: dict[str, Any] | None = None) -> Any:
        """Send one message, return its reply's data; a connection the server closed is opened
        again once. Raises ControlError when the server refuses or cannot do what was asked."""
        with self._lock:
            try:
                return self._exchange(kind, data)
            except (cc.AuthenticationError, RemoteError):
                raise
            except cc.ControlError:
                self.close()
                self._connect()
                return self._exchange(kind, data)

    def _exchange(self, kind: str, data: dict[str, Any] | None) -> Any:
        message = {"type": kind, **(data or {}), **({cc.SENDER_RUN: self.run} if self.run else {})}
        try:
            self._socket().sendall(cc.seal(self.secret, self.nonce, b"c", self.seq, message))
        except OSError as e:
            raise cc.ControlError(f"control server {self.server}: {e}") from None
        body = self._frame()
        if body.startswith(cc.REJECTED):
            reason = body[len(cc.REJECTED):].decode(errors="replace")
            raise cc.AuthenticationError(f"the control server at {self.server} rejected this node: {reason} "
                                         "(does the node hold this run's secret?)")
        reply = cc.open_body(self.secret, self.nonce, b"s", self.seq, body)
        self.seq += 1
        if not reply.get("ok"):
            raise RemoteError(f"the driver could not do {kind!r}: {reply.get('error', 'no reason given')}")
        return reply.get("data")

    def reserve(self, reservation: dict[str, Any]) -> list[dict[str, Any]]:
        """Register this node's `reservation` (control_channel.NODE_FIELDS) and wait until every node of the run has:
        every reservation. The driver's launch bounds the wait (it stops a run whose nodes do not all reserve)."""
        self.request(cc.REGISTER, {"data": reservation})
        while not self.request(cc.QUERY):
            time.sleep(POLL_SECONDS)
        return self.request(cc.CLUSTER)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class RemoteError(cc.ControlError):
    """The driver received the message but could not do what it asks (its reason is in the text)."""


class DriverLink:
    """What a TF node or sweep trial tells the driver, and the files it exchanges with the
    run's storage. `sender` names it in every report (control_channel.SENDER_*)."""

    def __init__(self, client: ControlClient, sender: dict[str, str]):
        self.client, self.sender = client, sender

    def _send(self, kind: str, **data: Any) -> Any:
        return self.client.request(kind, {**self.sender, **data})

    def started(self, record: NodeRecord) -> None:
        self._send(cc.STARTED, record=record)

    def first_step(self, resumed_at: int) -> None:
        self._send(cc.FIRST_STEP, resumed_at=resumed_at)

    def beat(self, steps: int) -> None:
        self._send(cc.BEAT, steps=steps)

    def progress(self, line: EpochLine) -> None:
        self._send(cc.PROGRESS, line=line.to_json())

    def failed(self, text: str) -> None:
        self._send(cc.FAILED, text=text)

    def lost(self) -> None:
        self._send(cc.LOST)

    def place(self) -> dict[str, Any] | None:
        """Where this lost parameter-server worker ran (control_channel.PLACE), while the run goes on."""
        reply = self._send(cc.PLACE)
        if reply is not None and not (isinstance(reply, dict) and {"cluster", "role", "index"} <= reply.keys()):
            raise cc.ControlError(f"the driver answered {cc.PLACE!r} with {reply!r}")
        return reply

    def result(self, result: ChiefResult) -> None:
        self._send(cc.RESULT, result=result)

    def done(self, status: str) -> None:
        self._send(cc.DONE, status=status)

    def status(self) -> str | None:
        return self._send(cc.STATUS)

    def status_of(self, run_id: str) -> str | None:
        """Attempt `run_id`'s end status (RUN_FAILED once a later one has begun); None while it runs."""
        return self._send(cc.STATUS, **{cc.SENDER_RUN: run_id})

    def next_attempt(self, after: str, task_attempt: int) -> dict[str, Any]:
        """What a rejoining node's task (Spark's attempt `task_attempt` of it) runs after attempt
        `after` ("" for none): control_channel.NEXT."""
        reply = self._send(cc.NEXT, after=after, task_attempt=task_attempt)
        if not isinstance(reply, dict):
            raise cc.ControlError(f"the driver answered {cc.NEXT!r} with {reply!r}")
        return reply

    def should_prune(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        """A lone node's epoch and its metrics to the driver, where a sweep's pruner decides."""
        return bool(self._send(cc.SHOULD_PRUNE, epoch=epoch, metrics=metrics))

    def publish(self, target: str, local_dir: str) -> None:
        """Every file under `local_dir` to the run's `target` (control_channel.TARGETS); returns
        when the driver has published them (a REPLACE target whole or not at all)."""
        files = {}
        for top, _, names in os.walk(local_dir):
            for name in sorted(names):
                full = os.path.join(top, name)
                rel = os.path.relpath(full, local_dir).replace(os.sep, "/")
                files[rel] = os.path.getsize(full)
                with open(full, "rb") as fh:
                    offset = 0
                    while True:
                        chunk = fh.read(cc.CHUNK)
                        if chunk or not offset:  # an empty file is one empty chunk
                            self._send(cc.PUT, target=target, path=rel, offset=offset, data=cc.encode_chunk(chunk))
                        offset += len(chunk)
                        if len(chunk) < cc.CHUNK:
                            break
        self._send(cc.PUBLISH, target=target, files=files)

    def fetch(self, target: str, local_dir: str) -> int:
        """The run's `target` on storage into `local_dir` (kept as it is when the target holds
        nothing); returns the number of files."""
        files = self._send(cc.LIST, target=target)
        for rel, size in sorted(files.items()):
            path = os.path.join(local_dir, cc.relative_path(rel))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                for offset in range(0, size, cc.CHUNK):
                    data = self._send(cc.GET, target=target, path=rel, offset=offset, length=cc.CHUNK)
                    fh.write(cc.decode_chunk(data))
        return len(files)
