"""The control channel between the driver and the processes it starts on executors (TF nodes
and sweep trials): reservations, everything a node reports, and files.

A cluster shares no disk, so nothing between the driver and a node goes through files: start-up times, heartbeats, epoch
progress, errors and tracebacks, lost workers, the chief's result, the run's end and the files a node publishes (its
SavedModel, resume state, TensorBoard logs) all travel as messages defined here, the one owner for both sides
(`cluster.driver.control_server` serves it, `cluster.node.control_client` speaks it). TensorFlowOnSpark's own channel
sends length-prefixed pickles that anyone able to reach the driver can have unpickled, and answers the cluster's node
managers' authkeys to anyone; this one:

  * authenticates every message with HMAC-SHA256 under a secret made fresh for each run on the
    driver and handed to the nodes inside the Spark task closure (never in a file or a log);
  * binds each tag to the connection (a random nonce the server sends first), the direction
    and the message's sequence number, so a message cannot be replayed, reflected or reordered;
  * decodes a message only after its tag verifies, and only as JSON: nothing received can run
    code; frames are capped in size.

Frames: 4-byte big-endian length, then a body. The server's first frame is `HELLO + nonce`;
every later body is `tag (32 bytes) + JSON`. A server that rejects a message sends one
`REJECTED` frame, unauthenticated and only a hint, and closes the connection.

Where the nodes cannot reach the process that runs the control server (a Spark Connect client), they connect to the
driver's relay (`tfos.spark.cluster.Relay` in the package's jar) and open with one frame, `RELAY + relay_token(secret)`;
the relay then carries the connection's bytes to the client and back, unread. The token only admits a connection to the
relay; every message is still authenticated end to end, by the client.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import socket
import struct
from typing import Any

HELLO = b"TFOS-CONTROL-1 "
REJECTED = b"REJECTED "
RELAY = b"TFOS-RELAY-1 "  # the jar's Relay.Prefix
NONCE_BYTES = 16
SECRET_BYTES = 32
TAG_BYTES = 32
MAX_FRAME = 1 << 20  # a cluster's reservations are a few KB

# Message types (the `type` field). Replies carry `ok` and `data`, or `ok: false` and `error`.
# Reservations, asked by TensorFlowOnSpark's node runtime:
REGISTER = "register"  # data: this node's reservation (NODE_FIELDS)
QUERY = "query"  # are all nodes reserved?
CLUSTER = "cluster"  # every reservation so far
NODE_FIELDS = {"executor_id": int, "host": str, "job_name": str, "task_index": int, "port": int}
# What a node reports. Every report names its sender: SENDER_NODE (e.g. "worker-1"). A node of a TF cluster also names
# the attempt it belongs to (SENDER_RUN, the attempt's run id): its node job outlives a failed attempt
# (`cluster.driver.generations`), and what an earlier one's processes still send is refused.
SENDER_NODE = "node"
SENDER_RUN = "run"
# A node's task, between attempts (it asks again while the reply says wait): data: {"after": the run id it ran last, ""
# for none; "task_attempt": its Spark task's attempt number}; reply data: {"launch": the next attempt's Launch (JSON),
# or None while there is none yet, "end": true once the node job is over}
NEXT = "next"
STARTED = "started"  # data: {"record": what the node was given (role, executor, pid, GPUs, ...)}
# The chief's first training step finished (the driver times it on arrival); data: {"resumed_at":
# the steps trained before it, by earlier attempts (0 on a fresh run)}
FIRST_STEP = "first_step"
# The chief is finishing steps (silence longer than train.step_timeout is a hang); data: {"steps":
# the steps done so far, across attempts}
BEAT = "beat"
PROGRESS = "progress"  # data: {"line": one finished epoch (`progress_log.EpochLine.to_json`)}
FAILED = "failed"  # data: {"text": the node's traceback}
LOST = "lost"  # a parameter-server worker lost with its executor (sent by its task's retry)
# The retry of a lost parameter-server worker asks where that worker was, to take its place (the
# chief's coordinator re-admits a worker only at its own address); reply data: {"cluster", "role",
# "index"} of the lost worker while the run goes on, else None
PLACE = "place"
RESULT = "result"  # data: {"result": the chief's final metrics, epochs run, step profile, sample}
DONE = "done"  # data: {"status": RUN_OK, RUN_FAILED or RUN_PRUNED}: the chief's end of the run
STATUS = "status"  # reply data: the run's end status, None while it runs (serving-only nodes poll it)
# A lone node (a sweep's single-process trial), after each epoch: {"epoch": from 1, "metrics": the
# epoch's, by name (NaN allowed)}; reply data: true when the sweep's pruner stops the trial there.
SHOULD_PRUNE = "should_prune"
RUN_OK, RUN_FAILED = "ok", "failed"
RUN_PRUNED = "pruned"  # a lone node the sweep's pruner stopped: it ended well, without an export
# Files between a node's local disk and the run's storage, in chunks of at most CHUNK bytes,
# base64 in the JSON body. A target is a name the driver maps to a directory of the run
# (TARGETS), never a path a node chooses; paths inside it are relative and checked.
PUT = "put"  # data: {"target", "path", "offset", "data"}: a chunk of a file the node publishes
PUBLISH = "publish"  # data: {"target", "files": {path: bytes}}: the driver publishes what it received
LIST = "list"  # data: {"target"}; reply data: {path: bytes} of the target's files on storage
GET = "get"  # data: {"target", "path", "offset", "length"}; reply data: a chunk, base64
SAVED_MODEL, BACKUP, LOGS = "saved_model", "backup", "logs"
REPLACE, MERGE = "replace", "merge"
TARGETS = {SAVED_MODEL: REPLACE, BACKUP: REPLACE, LOGS: MERGE}  # how each is published
CHUNK = 512 * 1024  # raw bytes per PUT or GET; base64 keeps a frame under MAX_FRAME


class ControlError(Exception):
    """A control message could not be sent, received or trusted."""


class AuthenticationError(ControlError):
    """A message's tag did not verify: the peer does not hold this run's secret."""


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def relay_token(secret: bytes) -> bytes:
    """What admits a node's connection to the driver's relay: derived from the run's secret, so
    the nodes need nothing more, and it tells nothing of the secret."""
    return hmac.new(secret, b"tfos relay token", hashlib.sha256).digest()


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


def encode_chunk(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_chunk(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ControlError("a file chunk is not base64 text")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except ValueError:
        raise ControlError("a file chunk is not valid base64") from None


def relative_path(path: Any) -> str:
    """A path inside a target, as a node may name it: relative, normalised, never leaving it."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise ControlError(f"not a file path: {path!r}")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ControlError(f"{path!r} is not a relative path inside its target")
    return path


def valid_reservation(data: Any) -> bool:
    """A node's reservation has the fields TF cluster specs are built from, of their types."""
    return isinstance(data, dict) and all(
        isinstance(data.get(k), t) and not isinstance(data.get(k), bool) for k, t in NODE_FIELDS.items())
