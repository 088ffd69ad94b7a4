"""The driver's control server: TF nodes and sweep trials reserve, report and hand over files here.

It replaces TensorFlowOnSpark's `reservation.Server` (which unpickles whatever reaches it, on
every interface) with the authenticated JSON channel of `tfos_jobs.control_channel`, bound to
the driver's cluster-facing address. What a message means is the handler's business (a training
run's `cluster.driver.run_state.RunState`, a sweep's trials); the server only authenticates, decodes and
answers. A message that fails authentication or decoding is dropped and its connection closed;
the first such message from each address is logged with the address, every one is counted
(`rejected`). A handler's own error (a file that cannot be published, say) is answered as an
error the node raises, and the connection stays open.
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import Counter
from typing import Any, Callable, cast

from tfos_jobs import control_channel as cc

Handler = Callable[[str, dict[str, Any]], Any]  # (message type, message) -> reply data

IDLE_SECONDS = 120.0  # a connection silent this long is closed


class _Connection:
    def __init__(self, sock: socket.socket, peer: str):
        self.sock, self.peer = sock, peer
        self.nonce = cc.new_nonce()
        self.seq = 0
        self.buffer = bytearray()
        self.last = time.monotonic()


class ControlServer:
    """`start()` in the driver, hand `address` and the secret to the nodes; `handler` answers
    each authenticated message (ControlError: a malformed one, rejected and disconnected)."""

    def __init__(self, secret: bytes, handler: Handler, *, bind: str, advertise: str,
                 ports: list[int] | None = None, log: Callable[[str], None] = print):
        self.secret, self.handler = secret, handler
        self.bind, self.advertise, self.ports = bind, advertise, ports or [0]
        self.log = log
        self.rejected: Counter[str] = Counter()  # peer host -> messages rejected
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.address: tuple[str, int] | None = None

    # -- driver API --------------------------------------------------------------------------

    def start(self) -> tuple[str, int]:
        self._listener = _listen(self.bind, self.ports)
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ)
        self.address = (self.advertise, self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, name="tfos-control", daemon=True)
        self._thread.start()
        return self.address

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        for key in list(self._selector.get_map().values()):
            cast(socket.socket, key.fileobj).close()  # only sockets are registered
        self._selector.close()

    def summary(self) -> dict[str, Any]:
        return {"rejected_messages": sum(self.rejected.values()), "rejected_from": sorted(self.rejected)}

    # -- the serving thread ------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._readable(key.data)
            self._close_idle()

    def _accept(self) -> None:
        if self._listener is None:  # the listener's events come only after start()
            raise RuntimeError("the control server has not been started")
        try:
            sock, peer = self._listener.accept()
        except OSError:
            return
        conn = _Connection(sock, peer[0])
        try:
            sock.sendall(cc.frame(cc.HELLO + conn.nonce))
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ, conn)

    def _readable(self, conn: _Connection) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(conn)
            return
        conn.buffer += chunk
        conn.last = time.monotonic()
        while len(conn.buffer) >= 4:
            try:
                length = cc.frame_length(bytes(conn.buffer[:4]))
            except cc.ControlError as e:
                self._reject(conn, str(e))
                return
            if len(conn.buffer) < 4 + length:
                return
            body = bytes(conn.buffer[4:4 + length])
            del conn.buffer[:4 + length]
            try:
                message = cc.open_body(self.secret, conn.nonce, b"c", conn.seq, body)
                reply = self._handle(message)
            except cc.ControlError as e:
                self._reject(conn, str(e))
                return
            try:
                sealed = cc.seal(self.secret, conn.nonce, b"s", conn.seq, reply)
            except (TypeError, ValueError) as e:  # a reply JSON cannot carry: the node hears why, the server goes on
                sealed = cc.seal(self.secret, conn.nonce, b"s", conn.seq,
                                 {"ok": False, "error": f"the driver's reply could not be encoded: {e}"[:2000]})
            try:
                conn.sock.setblocking(True)
                conn.sock.sendall(sealed)
                conn.sock.setblocking(False)
            except OSError:
                self._close(conn)
                return
            conn.seq += 1

    def _handle(self, message: dict[str, Any]) -> dict[str, Any]:
        kind = message.get("type")
        if not isinstance(kind, str):
            raise cc.ControlError("a message without a type")
        try:
            return {"ok": True, "data": self.handler(kind, message)}
        except cc.ControlError:
            raise
        except Exception as e:  # the handler could not do what was asked: the node hears why
            return {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}

    def _reject(self, conn: _Connection, reason: str) -> None:
        first = conn.peer not in self.rejected
        self.rejected[conn.peer] += 1
        if first:
            self.log(f"control channel: rejected a message from {conn.peer}: {reason}; the connection was closed "
                     "(further rejections from this address are counted, not shown)")
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(1.0)
            conn.sock.sendall(cc.frame(cc.REJECTED + reason.split(" (")[0].encode()[:200]))
        except OSError:
            pass
        self._close(conn)

    def _close(self, conn: _Connection) -> None:
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _close_idle(self) -> None:
        now = time.monotonic()
        for key in list(self._selector.get_map().values()):
            conn = key.data
            if conn is not None and now - conn.last > IDLE_SECONDS:
                self._close(conn)


def _listen(host: str, ports: list[int]) -> socket.socket:
    errors = []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in ports:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
            return sock
        except OSError as e:
            sock.close()
            errors.append(f"{port}: {e.strerror or e}")
    raise cc.ControlError(f"the reservation server cannot listen on {host} (ports tried: {'; '.join(errors[:5])})")


def control_address(conf: Any, configured: str) -> tuple[str, str]:
    """(address the control server binds to, address the nodes connect to): the configured
    one, else Spark's driver bind address, else the driver host Spark advertises. A wildcard
    bind is advertised as the driver host."""
    host = conf.get("spark.driver.host", None) or socket.gethostbyname(socket.gethostname())
    bind = configured or conf.get("spark.driver.bindAddress", None) or host
    return bind, host if bind in ("0.0.0.0", "::", "") else bind
