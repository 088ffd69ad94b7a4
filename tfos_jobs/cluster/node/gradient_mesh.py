"""Gradients summed over direct connections between a run's workers (`train.gradient_exchange =
"mesh"`, what "auto" picks wherever an all-gather would pay).

A TensorFlow collective over gRPC costs about 0.7 ms on loopback whatever its size up to ~100 KB: a two-worker step of
the demo model (3.4-4.0 ms) spent a fifth of its time in its one all-gather. The same pack sent over a TCP connection
and added up in numpy costs ~0.2 ms (docs/tuning.md, item 17). So each worker keeps one connection to every other
worker, sends its packed float32 gradients to all of them at once, receives theirs, and adds the n packs in rank order:
every worker computes the same sums bit for bit and the mirrored variables stay equal.

Set-up, once per attempt: every worker listens on a port of its own, the ports are all-gathered once through the
strategy, and each worker connects to every worker of a lower rank. A connection counts only once both ends proved they
hold the run's secret (a challenge-response of HMAC-SHA256 over both ends' nonces and ranks); anything else that
connects is closed, and the listener waits on for its peers, then closes. After that, nothing is ever decoded but
float32 values of the length both ends know.

A peer that goes away ends the step with TensorFlow's UnavailableError (a lost peer, which a
relaunch fixes), a peer that stops sending with DeadlineExceededError; both name the peer.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import select
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

MAGIC = b"tfosmesh"
NONCE = 16
MAC = 32
HELLO = len(MAGIC) + 4 + NONCE  # magic, the connector's rank, its nonce
HANDSHAKE_SECONDS = 10.0  # for one connection's handshake: a silent connection cannot hold the set-up longer


class MeshError(ConnectionError):
    """The mesh could not form: a peer did not connect, or did not prove it holds the secret."""


def mesh_key(secret: bytes, run_id: str) -> bytes:
    """The key of one attempt's mesh: a node of another attempt cannot join it."""
    return hmac.new(secret, b"tfos gradient mesh " + run_id.encode(), hashlib.sha256).digest()


def _proof(key: bytes, side: bytes, connector_nonce: bytes, listener_nonce: bytes, connector: int,
           listener: int) -> bytes:
    return hmac.new(key, side + connector_nonce + listener_nonce + struct.pack(">II", connector, listener),
                    hashlib.sha256).digest()


@dataclass
class Mesh:
    """One worker's connections to every other worker of its attempt (index: the peer's rank)."""

    rank: int
    hosts: list[str]  # every worker's host, by rank
    ports: list[int]
    timeout: float  # seconds without any byte from a peer before a step gives up
    peers: dict[int, socket.socket] = field(default_factory=dict)
    _buffers: dict[int, bytearray] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.hosts)

    def summed(self, own: np.ndarray) -> np.ndarray:
        """`own` plus every peer's array of the same shape, added in rank order."""
        own = np.ascontiguousarray(own, dtype=np.float32)
        out = memoryview(own.data).cast("B")
        nbytes = out.nbytes
        for r in self.peers:
            if len(self._buffers.get(r, b"")) != nbytes:
                self._buffers[r] = bytearray(nbytes)
        views = {r: memoryview(self._buffers[r]) for r in self.peers}
        sent = {r: 0 for r in self.peers}
        got = {r: 0 for r in self.peers}
        poller, ranks = select.poll(), {}
        for r, sock in self.peers.items():
            poller.register(sock, select.POLLIN | select.POLLOUT)
            ranks[sock.fileno()] = r
        pending = len(self.peers)
        while pending:
            events = poller.poll(self.timeout * 1000)
            if not events:
                late = min(r for r in self.peers if got[r] < nbytes or sent[r] < nbytes)
                raise _tf_error("DeadlineExceededError", f"gradient exchange: worker {self._name(late)} neither "
                                f"sent nor took data for {self.timeout:.0f} s")
            for fd, event in events:
                r = ranks[fd]
                sock = self.peers[r]
                if event & select.POLLNVAL:
                    raise _tf_error("UnavailableError", f"gradient exchange: worker {self._name(r)}'s connection is closed")
                try:
                    if event & select.POLLOUT and sent[r] < nbytes:
                        sent[r] += sock.send(out[sent[r]:])
                    if event & (select.POLLIN | select.POLLHUP | select.POLLERR) and got[r] < nbytes:
                        n = sock.recv_into(views[r][got[r]:], nbytes - got[r])
                        if n == 0:
                            raise _tf_error("UnavailableError",
                                            f"gradient exchange: worker {self._name(r)} closed its connection")
                        got[r] += n
                except BlockingIOError:
                    continue
                except OSError as e:
                    raise _tf_error("UnavailableError", f"gradient exchange: worker {self._name(r)} is gone ({e})")
                mask = (select.POLLOUT if sent[r] < nbytes else 0) | (select.POLLIN if got[r] < nbytes else 0)
                if mask:
                    poller.modify(sock, mask)
                else:
                    poller.unregister(sock)
                    pending -= 1
        parts = [own if r == self.rank else np.frombuffer(self._buffers[r], np.float32).reshape(own.shape)
                 for r in range(self.size)]
        total = parts[0].copy()
        for part in parts[1:]:
            total += part
        return total

    def close(self) -> None:
        for sock in self.peers.values():
            sock.close()
        self.peers.clear()

    def _name(self, rank: int) -> str:
        return f"{rank} ({self.hosts[rank]}:{self.ports[rank]})"


def listen(ports: Sequence[int] = ()) -> socket.socket:
    """This worker's mesh port, listening before the ports are gathered, so that every peer that learns it can connect:
    one of `ports` (the node's share of train.tf_ports, which its TF server took one of already), or any free port."""
    import random

    for port in random.SystemRandom().sample(list(ports), len(ports)) if ports else [0]:
        try:
            if socket.has_dualstack_ipv6():  # peers may name this host by an IPv4 or an IPv6 address
                return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=64)
            return socket.create_server(("", port), backlog=64)
        except OSError:
            if not ports:
                raise
    shown = ", ".join(map(str, list(ports)[:5])) + (", ..." if len(ports) > 5 else "")
    raise MeshError(f"gradient mesh: no free port among this node's share of train.tf_ports ({shown}); the range "
                    "needs two ports per node (its TF server and its gradient mesh)")


def connect(server: socket.socket, *, rank: int, hosts: list[str], ports: list[int], key: bytes,
            timeout: float) -> Mesh:
    """Form the mesh: connect to every lower rank, accept every higher one, within `timeout` s.
    Closes `server` either way."""
    mesh = Mesh(rank=rank, hosts=hosts, ports=ports, timeout=timeout)
    deadline = time.monotonic() + timeout
    try:
        for peer in range(rank):
            mesh.peers[peer] = _dial(peer, rank, hosts[peer], ports[peer], key, deadline)
        while len(mesh.peers) < len(hosts) - 1:
            peer, sock = _accept(server, rank, len(hosts), key, deadline, set(mesh.peers))
            mesh.peers[peer] = sock
    except BaseException:
        mesh.close()
        raise
    finally:
        server.close()
    for sock in mesh.peers.values():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
    return mesh


def _dial(peer: int, rank: int, host: str, port: int, key: bytes, deadline: float) -> socket.socket:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((host, port), timeout=max(0.1, min(HANDSHAKE_SECONDS,
                                                                                deadline - time.monotonic())))
        except OSError as e:
            last = e
            time.sleep(0.05)
            continue
        try:
            nonce = os.urandom(NONCE)
            sock.sendall(MAGIC + struct.pack(">I", rank) + nonce)
            reply = _read(sock, NONCE + MAC)
            theirs, proof = reply[:NONCE], reply[NONCE:]
            if not hmac.compare_digest(proof, _proof(key, b"L", nonce, theirs, rank, peer)):
                raise MeshError(f"gradient mesh: worker {peer} at {host}:{port} did not prove it holds this "
                                "run's secret")
            sock.sendall(_proof(key, b"C", nonce, theirs, rank, peer))
            sock.settimeout(None)
            return sock
        except BaseException:
            sock.close()
            raise
    raise MeshError(f"gradient mesh: worker {rank} could not connect to worker {peer} at {host}:{port} ({last})")


def _accept(server: socket.socket, rank: int, size: int, key: bytes, deadline: float,
            joined: set[int]) -> tuple[int, socket.socket]:
    """The next peer that proves it holds the secret; anything else is closed unread beyond its hello."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = sorted(set(range(rank + 1, size)) - joined)
            raise MeshError(f"gradient mesh: worker {rank} waited in vain for workers {missing} to connect")
        server.settimeout(left)
        try:
            sock, _ = server.accept()
        except socket.timeout:
            continue
        try:
            sock.settimeout(min(HANDSHAKE_SECONDS, max(0.1, deadline - time.monotonic())))
            hello = _read(sock, HELLO)
            peer = struct.unpack(">I", hello[len(MAGIC):len(MAGIC) + 4])[0]
            if hello[:len(MAGIC)] != MAGIC or not rank < peer < size or peer in joined:
                raise MeshError("not a peer's hello")
            theirs, nonce = hello[len(MAGIC) + 4:], os.urandom(NONCE)
            sock.sendall(nonce + _proof(key, b"L", theirs, nonce, peer, rank))
            if not hmac.compare_digest(_read(sock, MAC), _proof(key, b"C", theirs, nonce, peer, rank)):
                raise MeshError("no proof of the secret")
            sock.settimeout(None)
            return peer, sock
        except (OSError, MeshError):
            sock.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise MeshError("the connection closed during the handshake")
        data += chunk
    return data


def _tf_error(kind: str, message: str) -> Exception:
    """TensorFlow's error `kind`, which a step raising it keeps (the driver retries lost peers)."""
    import tensorflow as tf

    return getattr(tf.errors, kind)(None, None, message)


def open_mesh(strategy: Any, *, secret: bytes, run_id: str, rank: int, hosts: list[str],
              timeout: float, ports: Sequence[int] = ()) -> Mesh:
    """The mesh of a MultiWorkerMirrored run, its ports learnt in one all-gather through `strategy`;
    this worker listens on one of `ports` (any free port if empty)."""
    import tensorflow as tf

    server = listen(ports)
    port = server.getsockname()[1]

    @tf.function
    def gather():
        def share():
            return tf.distribute.get_replica_context().all_gather(tf.constant([port], tf.int64), axis=0)
        return strategy.run(share)

    try:
        ports = [int(p) for p in strategy.experimental_local_results(gather())[0].numpy()]
    except BaseException:
        server.close()
        raise
    if len(ports) != len(hosts):
        server.close()
        raise MeshError(f"gradient mesh: {len(ports)} workers gathered, {len(hosts)} in the cluster")
    return connect(server, rank=rank, hosts=hosts, ports=ports, key=mesh_key(secret, run_id), timeout=timeout)


def hosts_by_rank(cluster: dict[str, list[str]]) -> list[str]:
    """The training workers' hosts in rank order (the chief first: `topology.worker_rank`)."""
    from tfos_jobs.topology import Role

    addresses = [*cluster.get(Role.CHIEF.value, []), *cluster.get(Role.WORKER.value, [])]
    return [a.rpartition(":")[0].strip("[]") for a in addresses]

