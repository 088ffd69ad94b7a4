"""The workers' gradient mesh (cluster/node/gradient_mesh.py) on loopback, each worker a thread:
it forms only between holders of the run's secret, sums in rank order on every worker, and a
lost peer ends the step with TensorFlow's retriable error naming it. tests/unit/test_exchange.py
trains through it in two TensorFlow processes."""
from __future__ import annotations

import pickle
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import pytest

from tfos_jobs.cluster.driver.failure_policy import retriable
from tfos_jobs.cluster.node import gradient_mesh as gm

KEY = gm.mesh_key(b"the run's secret", "run-1")


def form(size: int, keys: list[bytes] | None = None, timeout: float = 20.0,
         before: Callable[[list[int]], None] | None = None) -> list[gm.Mesh]:
    """A mesh of `size` workers on loopback; `before(ports)` runs once every worker listens."""
    servers = [gm.listen() for _ in range(size)]
    ports = [s.getsockname()[1] for s in servers]
    if before is not None:
        before(ports)
    keys = keys or [KEY] * size
    with ThreadPoolExecutor(size) as pool:
        futures = [pool.submit(gm.connect, servers[r], rank=r, hosts=["127.0.0.1"] * size, ports=ports,
                               key=keys[r], timeout=timeout) for r in range(size)]
        return [f.result() for f in futures]


def exchange(meshes: list[gm.Mesh], arrays: list[np.ndarray]) -> list[np.ndarray]:
    with ThreadPoolExecutor(len(meshes)) as pool:
        return list(pool.map(lambda m, a: m.summed(a), meshes, arrays))


def test_every_worker_gets_the_same_sum_added_in_rank_order():
    meshes = form(3)
    try:
        rng = np.random.default_rng(0)
        arrays = [rng.normal(size=300_000).astype(np.float32) for _ in range(3)]  # 1.2 MB: beyond socket buffers
        sums = exchange(meshes, arrays)
        expected = (arrays[0] + arrays[1]) + arrays[2]
        for total in sums:
            np.testing.assert_array_equal(total, expected)
        again = exchange(meshes, [a * 2 for a in arrays])  # the connections carry step after step
        np.testing.assert_array_equal(again[1], (arrays[0] * 2 + arrays[1] * 2) + arrays[2] * 2)
    finally:
        for m in meshes:
            m.close()


def test_strangers_pickles_and_garbage_are_refused_and_the_mesh_still_forms(tmp_path):
    strangers: list[socket.socket] = []
    marker = tmp_path / "unpickled"

    class Bomb:
        def __reduce__(self):
            return (exec, (f"import pathlib; pathlib.Path({str(marker)!r}).touch()",))

    def intrude(ports: list[int]) -> None:
        for payload in (pickle.dumps(Bomb()), b"GET / HTTP/1.1\r\n\r\n" + b"x" * 100,
                        gm.MAGIC + (1).to_bytes(4, "big") + b"n" * gm.NONCE + b"p" * gm.MAC):
            sock = socket.create_connection(("127.0.0.1", ports[0]))
            sock.sendall(payload)
            strangers.append(sock)

    meshes = form(2, before=intrude)
    try:
        assert exchange(meshes, [np.ones(4, np.float32), np.full(4, 2, np.float32)])[0].tolist() == [3.0] * 4
        assert not marker.exists()
        for sock in strangers:  # closed by the worker: nothing more comes, or the connection was reset
            sock.settimeout(10)
            try:
                while sock.recv(4096):
                    pass
            except ConnectionResetError:
                pass
    finally:
        for m in meshes:
            m.close()
        for sock in strangers:
            sock.close()


def test_a_worker_without_the_secret_cannot_join():
    with pytest.raises(gm.MeshError, match=r"did not prove it holds this run's secret|waited in vain for workers \[1\]"):
        form(2, keys=[KEY, gm.mesh_key(b"another secret", "run-1")], timeout=3)
    with pytest.raises(gm.MeshError):  # a node of another attempt of the same run
        form(2, keys=[KEY, gm.mesh_key(b"the run's secret", "run-2")], timeout=3)


def test_a_lost_peer_ends_the_step_with_a_retriable_error_naming_it():
    import tensorflow as tf

    meshes = form(2)
    try:
        meshes[1].close()
        with pytest.raises(tf.errors.UnavailableError, match=r"worker 1 \(127\.0\.0\.1:\d+\) closed its connection") as e:
            meshes[0].summed(np.ones(1000, np.float32))
        assert retriable([f"{type(e.value).__name__}: {e.value}"])
    finally:
        meshes[0].close()


def test_a_silent_peer_ends_the_step_after_the_timeout():
    import tensorflow as tf

    meshes = form(2)
    try:
        meshes[0].timeout = 0.5
        silent = r"worker 1 \(127\.0\.0\.1:\d+\) neither sent nor took data for [01] s"
        with pytest.raises(tf.errors.DeadlineExceededError, match=silent):
            meshes[0].summed(np.ones(10, np.float32))
    finally:
        for m in meshes:
            m.close()


def test_hosts_come_in_rank_order_chief_first():
    cluster = {"worker": ["10.0.0.2:2222", "10.0.0.3:2222"], "chief": ["10.0.0.1:2222"], "ps": ["10.0.0.9:1"]}
    assert gm.hosts_by_rank(cluster) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert gm.hosts_by_rank({"chief": ["[::1]:5"]}) == ["::1"]
