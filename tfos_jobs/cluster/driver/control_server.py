"""The driver's control server: TF nodes reserve, report and hand over files here.

It replaces TensorFlowOnSpark's `reservation.Server` (which unpickles whatever reaches it, on every interface) with the
authenticated JSON channel of `tfos_jobs.control_channel`, bound to the driver's cluster-facing address. What a message
means is the handler's business (a training run's `cluster.driver.run_state.RunState`, a sweep's trials); the server
only authenticates, decodes and answers. A message that fails authentication or decoding is dropped and its connection
closed; the first such message from each address is logged with the address, every one is counted (`rejected`). A
handler's own error (a file that cannot be published, say) is answered as an error the node raises, and the connection
stays open.
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import Counter
from typing import Any, Callable, cast

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.metrics import ControlReport, control_report

Handler = Callable[[str, dict[str, Any]], Any]  # (message type, message) -> reply data

IDLE_SECONDS = 120.0  # a connection silent this long is closed


class Session:
    """One node's connection as the protocol sees it, whatever carries its bytes (a socket here,
    the driver's relay in `cluster.driver.relay`): `hello` is the first frame to send; `receive`
    takes the bytes that arrived and returns the frames to send back. A message that fails
    authentication or decoding raises `Rejected`, whose frame is the last thing to send."""

    def __init__(self, server: "Endpoint", peer: str):
        self.server, self.peer = server, peer
        self.nonce = cc.new_nonce()
        self.seq = 0
        self.buffer = bytearray()
        self.last = time.monotonic()

    def hello(self) -> bytes:
        return cc.frame(cc.HELLO + self.nonce)

    def receive(self, data: bytes) -> list[bytes]:
        self.buffer += data
        self.last = time.monotonic()
        out = []
        while len(self.buffer) >= 4:
            try:
                length = cc.frame_length(bytes(self.buffer[:4]))
            except cc.ControlError as e:
                raise self.server.reject(self, str(e)) from None
            if len(self.buffer) < 4 + length:
                break
            body = bytes(self.buffer[4:4 + length])
            del self.buffer[:4 + length]
            try:
                message = cc.open_body(self.server.secret, self.nonce, b"c", self.seq, body)
                reply = self.server.answer(message)
            except cc.ControlError as e:
                raise self.server.reject(self, str(e)) from None
            try:
                sealed = cc.seal(self.server.secret, self.nonce, b"s", self.seq, reply)
            except (TypeError, ValueError) as e:  # a reply JSON cannot carry: the node hears why, the server goes on
                sealed = cc.seal(self.server.secret, self.nonce, b"s", self.seq,
                                 {"ok": False, "error": f"the driver's reply could not be encoded: {e}"[:2000]})
            out.append(sealed)
            self.seq += 1
        return out


class Rejected(Exception):
    """A connection's message was refused: send `frame`, then close the connection."""

    def __init__(self, frame: bytes):
        super().__init__("rejected")
        self.frame = frame


class Endpoint:
    """What every transport of the control channel shares: the run's secret, the handler that
    answers, and the count of rejected messages by peer address."""

    def __init__(self, secret: bytes, handler: Handler, log: Callable[[str], None]):
        self.secret, self.handler, self.log = secret, handler, log
        self.rejected: Counter[str] = Counter()  # peer host -> messages rejected
        self.address: tuple[str, int] | None = None

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        kind = message.get("type")
        if not isinstance(kind, str):
            raise cc.ControlError("a message without a type")
        try:
            return {"ok": True, "data": self.handler(kind, message)}
        except cc.ControlError:
            raise
        except Exception as e:  # the handler could not do what was asked: the node hears why
            return {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}

    def reject(self, session: Session, reason: str) -> Rejected:
        first = session.peer not in self.rejected
        self.rejected[session.peer] += 1
        if first:
            self.log(f"control channel: rejected a message from {session.peer}: {reason}; the connection was closed "
                     "(further rejections from this address are counted, not shown)")
        return Rejected(cc.frame(cc.REJECTED + reason.split(" (")[0].encode()[:200]))

    def summary(self) -> ControlReport:
        return control_report(self.rejected)

    def start(self) -> tuple[str, int]:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class ControlServer(Endpoint):
    """`start()` in the driver, hand `address` and the secret to the nodes; `handler` answers
    each authenticated message (ControlError: a malformed one, rejected and disconnected).
    The nodes connect to it directly: where executors can reach this process."""

    def __init__(self, secret: bytes, handler: Handler, *, bind: str, advertise: str,
                 ports: list[int] | None = None, log: Callable[[str], None] = print):
        super().__init__(secret, handler, log)
        self.bind, self.advertise, self.ports = bind, advertise, ports or [0]
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

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

    # -- the serving thread ------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._readable(cast(socket.socket, key.fileobj), key.data)
            self._close_idle()

    def _accept(self) -> None:
        if self._listener is None:  # the listener's events come only after start()
            raise RuntimeError("the control server has not been started")
        try:
            sock, peer = self._listener.accept()
        except OSError:
            return
        session = Session(self, peer[0])
        try:
            sock.sendall(session.hello())
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ, session)

    def _readable(self, sock: socket.socket, session: Session) -> None:
        try:
            chunk = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(sock)
            return
        try:
            replies = session.receive(chunk)
        except Rejected as r:
            self._send(sock, [r.frame], timeout=1.0)
            self._close(sock)
            return
        if replies and not self._send(sock, replies):
            self._close(sock)

    @staticmethod
    def _send(sock: socket.socket, frames: list[bytes], timeout: float | None = None) -> bool:
        try:
            sock.setblocking(True)
            if timeout is not None:
                sock.settimeout(timeout)
            sock.sendall(b"".join(frames))
            sock.setblocking(False)
            return True
        except OSError:
            return False

    def _close(self, sock: socket.socket) -> None:
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def _close_idle(self) -> None:
        now = time.monotonic()
        for key in list(self._selector.get_map().values()):
            session = key.data
            if session is not None and now - session.last > IDLE_SECONDS:
                self._close(cast(socket.socket, key.fileobj))


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
    """(address the control server binds to, address the nodes connect to): the configured one, else Spark's driver bind
    address, else the driver host Spark advertises. A wildcard bind is advertised as the driver host."""
    host = conf.get("spark.driver.host", None) or socket.gethostbyname(socket.gethostname())
    bind = configured or conf.get("spark.driver.bindAddress", None) or host
    return bind, host if bind in ("0.0.0.0", "::", "") else bind
