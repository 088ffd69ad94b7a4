"""The control channel between the driver and TF nodes: reservations and cluster info.

One owner for both sides (driver.reservations serves it, executor.reservation_client speaks
it). TensorFlowOnSpark's own channel sends length-prefixed pickles that anyone able to reach
the driver can have unpickled, and answers the cluster's node managers' authkeys to anyone;
this one:

  * authenticates every message with HMAC-SHA256 under a secret made fresh for each run on the
    driver and handed to the nodes inside the Spark task closure (never in a file or a log);
  * binds each tag to the connection (a random nonce the server sends first), the direction
    and the message's sequence number, so a message cannot be replayed, reflected or reordered;
  * decodes a message only after its tag verifies, and only as JSON: nothing received can run
    code; frames are capped in size.

Frames: 4-byte big-endian length, then a body. The server's first frame is `HELLO + nonce`;
every later body is `tag (32 bytes) + JSON`. A server that rejects a message sends one
`REJECTED` frame, unauthenticated and only a hint, and closes the connection.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import struct
from typing import Any

HELLO = b"TFOS-CONTROL-1 "
REJECTED = b"REJECTED "
NONCE_BYTES = 16
SECRET_BYTES = 32
TAG_BYTES = 32
MAX_FRAME = 1 << 20  # a cluster's reservations are a few KB

# Message types (the `type` field); replies carry `ok` and `data`.
REGISTER = "register"  # data: this node's reservation (NODE_FIELDS)
QUERY = "query"  # are all nodes reserved?
CLUSTER = "cluster"  # every reservation so far
NODE_FIELDS = {"executor_id": int, "host": str, "job_name": str, "task_index": int, "port": int}


class ControlError(Exception):
    """A control message could not be sent, received or trusted."""


class AuthenticationError(ControlError):
    """A message's tag did not verify: the peer does not hold this run's secret."""


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def tag(secret: bytes, nonce: bytes, direction: bytes, seq: int, payload: bytes) -> bytes:
    """`direction`: b"c" for client to server, b"s" for the replies."""
    return hmac.new(secret, direction + nonce + struct.pack(">Q", seq) + payload, hashlib.sha256).digest()


def seal(secret: bytes, nonce: bytes, direction: bytes, seq: int, message: dict[str, Any]) -> bytes:
    """A whole frame carrying `message`."""
    payload = json.dumps(message, separators=(",", ":")).encode()
    return frame(tag(secret, nonce, direction, seq, payload) + payload)


def open_body(secret: bytes, nonce: bytes, direction: bytes, seq: int, body: bytes) -> dict[str, Any]:
    """The message in a frame body; raises AuthenticationError before decoding anything
    whose tag does not verify, ControlError for a verified body that is not a JSON object."""
    if len(body) < TAG_BYTES:
        raise AuthenticationError("message shorter than its tag")
    received, payload = body[:TAG_BYTES], body[TAG_BYTES:]
    if not hmac.compare_digest(received, tag(secret, nonce, direction, seq, payload)):
        raise AuthenticationError("authentication failed (the sender does not hold this run's secret)")
    try:
        message = json.loads(payload)
    except ValueError as e:
        raise ControlError(f"an authenticated message is not JSON: {e}") from None
    if not isinstance(message, dict):
        raise ControlError("an authenticated message is not a JSON object")
    return message


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def frame_length(header: bytes) -> int:
    """The body length a 4-byte header announces; refuses frames over MAX_FRAME."""
    (length,) = struct.unpack(">I", header)
    if length > MAX_FRAME:
        raise ControlError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    return length


def read_frame(sock: socket.socket) -> bytes:
    """One frame's body from a blocking socket."""
    length = frame_length(_read_exactly(sock, 4))
    return _read_exactly(sock, length)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ControlError("the peer closed the connection")
        data += chunk
    return bytes(data)


def valid_reservation(data: Any) -> bool:
    """A node's reservation has the fields TF cluster specs are built from, of their types."""
    return isinstance(data, dict) and all(
        isinstance(data.get(k), t) and not isinstance(data.get(k), bool) for k, t in NODE_FIELDS.items())
