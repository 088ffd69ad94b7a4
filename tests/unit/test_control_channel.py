"""The control channel between driver and TF nodes: a real server and client over loopback
TCP, no Spark. Nothing a peer sends is decoded before its tag verifies, and nothing is ever
unpickled."""
from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time

import pytest

from tfos_jobs import control_channel as cc
from tfos_jobs.config import parse_ports
from tfos_jobs.driver.reservations import ReservationServer
from tfos_jobs.driver.tf_cluster import control_address
from tfos_jobs.executor.reservation_client import AuthenticatedClient

NODE = {"executor_id": 1, "host": "10.0.0.5", "job_name": "worker", "task_index": 0, "port": 40001}


class Exploit:
    """What an attacker sends TensorFlowOnSpark's reservation server: unpickling it runs code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def server():
    lines: list[str] = []
    srv = ReservationServer(2, cc.new_secret(), bind="127.0.0.1", advertise="127.0.0.1", log=lines.append)
    srv.start()
    srv.lines = lines
    yield srv
    srv.stop()


def client(srv: ReservationServer, secret: bytes | None = None) -> AuthenticatedClient:
    cls = type("C", (AuthenticatedClient,), {"secret": srv.secret if secret is None else secret})
    return cls(srv.address)


def test_seal_and_open_bind_the_message_to_secret_connection_direction_and_order():
    secret, nonce = cc.new_secret(), cc.new_nonce()
    body = cc.seal(secret, nonce, b"c", 3, {"type": "query"})[4:]
    assert cc.open_body(secret, nonce, b"c", 3, body) == {"type": "query"}
    for args in ((cc.new_secret(), nonce, b"c", 3), (secret, cc.new_nonce(), b"c", 3), (secret, nonce, b"s", 3),
                 (secret, nonce, b"c", 4)):
        with pytest.raises(cc.AuthenticationError):
            cc.open_body(*args, body)
    tampered = body[:-2] + b"1}"
    with pytest.raises(cc.AuthenticationError):
        cc.open_body(secret, nonce, b"c", 3, tampered)
    with pytest.raises(cc.ControlError, match="exceeds"):
        cc.frame_length(struct.pack(">I", cc.MAX_FRAME + 1))
    payload = b"[1, 2]"
    with pytest.raises(cc.ControlError, match="not a JSON object"):
        cc.open_body(secret, nonce, b"c", 0, cc.tag(secret, nonce, b"c", 0, payload) + payload)


def test_nodes_with_the_secret_reserve_and_learn_the_cluster(server):
    a, b = client(server), client(server)
    assert a.get_reservations() == []
    a.register({**NODE, "authkey": b"\x00manager-key", "addr": "/tmp/pymp-x/listener"})
    assert not server.done() and server.remaining() == 1
    b.register({**NODE, "executor_id": 0, "job_name": "chief", "port": 40000})
    assert a.await_reservations() == b.get_reservations() == server.reservations()
    assert server.done()
    assert all(set(r) == set(cc.NODE_FIELDS) for r in server.reservations())  # no authkey, no manager address
    assert server.summary() == {"rejected_messages": 0, "rejected_from": []}
    a.close(), b.close()


def test_a_wrong_secret_is_rejected_counted_and_logged_once_per_peer(server):
    for _ in range(2):
        with pytest.raises(cc.AuthenticationError, match="rejected this node: authentication failed"):
            client(server, secret=cc.new_secret()).register(NODE)
    assert server.reservations() == []
    assert server.summary() == {"rejected_messages": 2, "rejected_from": ["127.0.0.1"]}
    assert len(server.lines) == 1 and "rejected a message from 127.0.0.1: authentication failed" in server.lines[0]
    assert client(server).get_reservations() == []  # the server still serves


def test_a_pickle_or_garbage_runs_nothing_and_is_dropped(server, tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Exploit(str(marker)))
    for data in (struct.pack(">I", len(payload)) + payload, os.urandom(300), struct.pack(">I", 2**31) + b"x" * 10):
        with socket.create_connection(server.address, timeout=5) as sock:
            sock.sendall(data)
            received = b""
            while True:  # the server answers with its hello, then a rejection, then closes
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
            assert cc.REJECTED in received
    time.sleep(0.3)
    assert not marker.exists()
    assert server.summary()["rejected_messages"] == 3
    assert client(server).get_reservations() == []


def test_a_reservation_without_its_fields_is_refused(server):
    with pytest.raises(cc.ControlError):
        client(server)._request(cc.REGISTER, {"executor_id": "1", "host": "h"})
    assert server.reservations() == [] and server.summary()["rejected_messages"] == 1


def test_the_server_listens_on_the_driver_address_only():
    srv = ReservationServer(1, cc.new_secret(), bind="127.0.0.1", advertise="127.0.0.1", ports=parse_ports(""))
    host, port = srv.start()
    try:
        assert srv._listener.getsockname() == ("127.0.0.1", port)
    finally:
        srv.stop()
    assert control_address({"spark.driver.host": "10.1.2.3"}, "") == ("10.1.2.3", "10.1.2.3")
    assert control_address({"spark.driver.host": "10.1.2.3", "spark.driver.bindAddress": "0.0.0.0"}, "") == (
        "0.0.0.0", "10.1.2.3")
    assert control_address({"spark.driver.host": "10.1.2.3"}, "192.168.0.9") == ("192.168.0.9", "192.168.0.9")
    assert parse_ports("") == [0] and parse_ports("9000-9002") == [9000, 9001, 9002]
    with pytest.raises(ValueError):
        parse_ports("9002-9000")


def test_slow_and_idle_peers_do_not_block_others(server):
    idle = socket.create_connection(server.address, timeout=5)
    idle.sendall(struct.pack(">I", 100) + b"x")  # half a frame, then nothing
    done = threading.Event()
    threading.Thread(target=lambda: (client(server).register(NODE), done.set()), daemon=True).start()
    assert done.wait(5)
    idle.close()
