"""The gradient exchange across workers (model/exchange.py). TensorFlow only, no Spark.

Two real TensorFlow worker processes form a MultiWorkerMirrored cluster on loopback ports: the
all-gather path must give each worker the same sums as the ring all-reduce, bit for bit, in one
collective, the workers' mesh (cluster/node/gradient_mesh.py) the same sums with none, and
training a model through either must end with the same weights."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tfos_jobs import topology

WORKER = textwrap.dedent("""
    import json, os, sys
    ports, index = json.loads(sys.argv[1]), int(sys.argv[2])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np, tensorflow as tf
    from tfos_jobs import topology
    from tfos_jobs.cluster.node import gradient_mesh
    from tfos_jobs.model import exchange, steps

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    strategy.extended.experimental_enable_get_next_as_optional = False
    mesh = gradient_mesh.open_mesh(strategy, secret=b"secret", run_id="run-1", rank=index,
                                   hosts=["localhost"] * len(ports), timeout=60)
    out = {}

    # 1. summed() against the ring all-reduce, on gradients that differ per worker
    with strategy.scope():
        variables = [tf.Variable(tf.zeros([3, 2])), tf.Variable(tf.zeros([5])),
                     tf.Variable(tf.zeros([40, 2])), tf.Variable(tf.zeros([4], tf.float64))]
    rng = np.random.default_rng(index)
    values = [rng.normal(size=[3, 2]).astype(np.float32), rng.normal(size=[5]).astype(np.float32),
              rng.normal(size=[2, 2]).astype(np.float32), rng.normal(size=[4])]

    def gradients():
        sparse = tf.IndexedSlices(tf.constant(values[2]), tf.constant([index, 7]), tf.constant([40, 2]))
        return [tf.constant(values[0]), tf.constant(values[1]), sparse, tf.constant(values[3]), None]

    def dense(gs):
        return [tf.convert_to_tensor(g) if g is not None else tf.zeros([0]) for g in gs]

    @tf.function
    def gathered():
        return strategy.run(lambda: dense(exchange.summed(gradients(), variables + [variables[0]])))

    @tf.function
    def reduced():
        def step():
            ctx, gs = tf.distribute.get_replica_context(), gradients()
            return dense([ctx.all_reduce(tf.distribute.ReduceOp.SUM, g) for g in gs[:4]])
        return strategy.run(step)

    @tf.function
    def meshed():
        return strategy.run(lambda: dense(exchange.summed(gradients(), variables + [variables[0]], mesh.summed)))

    out["gathered"] = [t.numpy().tolist() for t in gathered()]
    out["meshed"] = [t.numpy().tolist() for t in meshed()]
    out["reduced"] = [t.numpy().tolist() for t in reduced()]

    @tf.function
    def dense_only():
        return strategy.run(lambda: exchange.summed(gradients()[:2], variables[:2]))

    @tf.function
    def dense_meshed():
        return strategy.run(lambda: exchange.summed(gradients()[:2], variables[:2], mesh.summed))

    def ops_of(fn):
        graph = fn.get_concrete_function().graph.as_graph_def()
        ops = [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
        return {op: ops.count(op) for op in ("CollectiveGatherV2", "CollectiveReduceV2", "PyFunc")}

    out["ops"], out["mesh_ops"] = ops_of(dense_only), ops_of(dense_meshed)

    # 2. the same training run through each exchange
    x = np.random.default_rng(42).integers(0, 20, 2048).astype(np.int64)
    y = (x % 3 == 0).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shard(len(ports), index).batch(64).repeat()
    for mode in (topology.MESH, topology.ALL_GATHER, topology.ALL_REDUCE):
        tf.keras.utils.set_random_seed(3)
        with strategy.scope():
            inp = tf.keras.Input(shape=(), dtype="int64")
            hidden = tf.keras.layers.Dense(8, activation="relu")(tf.keras.layers.Embedding(20, 4)(inp))
            model = steps.wrap(tf.keras.Model(inp, tf.keras.layers.Dense(1, activation="sigmoid")(hidden)), 1000, mode,
                               mesh.summed if mode == topology.MESH else None)
            model.compile(optimizer="adam", loss="binary_crossentropy", steps_per_execution=5)
        model.fit(data, epochs=2, steps_per_epoch=10, verbose=0)
        out[mode] = [w.tolist() for w in model.get_weights()]
    print("RESULT " + json.dumps(out))
""")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def two_workers() -> list[dict]:
    ports = free_ports(2)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(ports), str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    outputs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-3000:]
            outputs.append(json.loads(next(l for l in stdout.splitlines() if l.startswith("RESULT "))[7:]))
    finally:
        for proc in procs:
            proc.kill()
    return outputs


def test_auto_meshes_with_two_workers_or_small_gradients():
    small, big = topology.GATHER_BYTES, topology.GATHER_BYTES + 1
    auto, gather, ring = topology.AUTO, topology.ALL_GATHER, topology.ALL_REDUCE
    mesh = topology.MESH
    assert topology.choose_exchange(auto, 2, 10 * big) == mesh  # the same bytes as the ring, no collective
    assert topology.choose_exchange(auto, 3, small) == mesh
    assert topology.choose_exchange(auto, 3, big) == ring
    assert topology.choose_exchange(ring, 2, 1) == ring
    assert topology.choose_exchange(gather, 8, 10 * big) == gather
    with pytest.raises(ValueError, match="'ring' is not one of auto, mesh, all_gather, all_reduce"):
        topology.choose_exchange("ring", 2, 1)


def test_summed_equals_the_ring_all_reduce_on_every_worker(two_workers):
    import numpy as np

    for out in two_workers:
        gathered, reduced = out["gathered"], out["reduced"]
        for i in range(4):  # dense float32 (gathered), sparse and float64 (through the all-reduce)
            assert gathered[i] == reduced[i], f"gradient {i}"
        assert gathered[4] == []  # a None gradient stays None
    assert two_workers[0]["gathered"] == two_workers[1]["gathered"]  # both workers hold the same sums
    rng = [np.random.default_rng(i) for i in range(2)]
    expected = sum(r.normal(size=[3, 2]).astype(np.float32) for r in rng)
    np.testing.assert_array_equal(np.asarray(two_workers[0]["gathered"][0], np.float32), expected)


def test_dense_gradients_travel_in_one_gather_and_no_reduce(two_workers):
    assert two_workers[0]["ops"] == {"CollectiveGatherV2": 1, "CollectiveReduceV2": 0, "PyFunc": 0}


def test_the_mesh_sums_as_the_ring_does_without_a_collective(two_workers):
    for out in two_workers:
        assert out["meshed"] == out["reduced"][:4] + [[]]
        assert out["mesh_ops"] == {"CollectiveGatherV2": 0, "CollectiveReduceV2": 0, "PyFunc": 1}


def test_training_through_the_gather_or_the_mesh_ends_with_the_ring_s_weights(two_workers):
    import numpy as np

    first, second = two_workers
    ring = topology.ALL_REDUCE
    for mode in (topology.ALL_GATHER, topology.MESH):
        for a, b in zip(first[mode], first[ring]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        for a, b in zip(first[mode], second[mode]):  # the mirrored variables stay equal
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert not np.allclose(np.asarray(first[mode][0]), 0.0)  # it trained
