"""How a multi-worker step adds up its gradients across the workers.

MultiWorkerMirrored's all-reduce is a ring: 2 (n - 1) transfers one after the other, each a
remote call that waits for the peer. For a model whose gradients pack into a few hundred KB
the waits are the cost, not the bytes: on loopback here one collective takes ~0.7 ms whatever
its size up to ~100 KB. An all-gather of the same packed tensor takes n - 1 transfers; each
worker then adds the n copies itself, in rank order, so every worker computes the same sums
bit for bit and the mirrored variables stay equal. With two workers both ways move the same
bytes; with more, the gather moves (n - 1) times the pack per worker instead of about twice,
which pays while the pack is small.

The mesh (`cluster.node.gradient_mesh`) moves the same packs without TensorFlow's collectives:
each worker sends its pack to every other over a TCP connection of their own and adds the n
packs in rank order, in a numpy call inside the step (~0.2 ms for the demo's pack here).

Which exchange a run uses is the topology's to say (`topology.choose_exchange`); `summed` runs
inside a MultiWorkerMirrored replica function and imports TensorFlow.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

def summed(gradients: list[Any], variables: list[Any],
           mesh_sum: Callable[[np.ndarray], np.ndarray] | None = None) -> list[Any]:
    """Each gradient of `variables` summed over all workers; None stays None.

    Dense float32 gradients travel packed in one all-gather, or with `mesh_sum` (the run's
    `cluster.node.gradient_mesh.Mesh.summed`) over the workers' own connections; anything else
    (sparse `IndexedSlices`, other dtypes) goes through the strategy's own all-reduce."""
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    gather = _gather_fn(ctx) if mesh_sum is None else _mesh_fn(mesh_sum)
    dense = [i for i, g in enumerate(gradients)
             if g is not None and not isinstance(g, tf.IndexedSlices) and g.dtype == tf.float32]
    out = list(gradients)
    if dense and gather is not None:
        shapes = [variables[i].shape for i in dense]
        packed = tf.concat([tf.reshape(gradients[i], [-1]) for i in dense], axis=0)
        if mesh_sum is None:
            gathered = gather(packed)
            total = tf.reduce_sum(tf.reshape(gathered, [ctx.num_replicas_in_sync, -1]), axis=0)
        else:
            total = gather(packed)
        for i, shape, flat in zip(dense, shapes, tf.split(total, [s.num_elements() for s in shapes])):
            out[i] = tf.reshape(flat, shape)
    else:
        dense = []
    groups: dict[Any, list[int]] = {}  # the strategy packs one dtype at a time
    for i, g in enumerate(gradients):
        if g is not None and i not in dense:
            groups.setdefault("sparse" if isinstance(g, tf.IndexedSlices) else g.dtype, []).append(i)
    for indices in groups.values():
        for i, reduced in zip(indices, ctx.all_reduce(tf.distribute.ReduceOp.SUM, [gradients[i] for i in indices])):
            out[i] = reduced
    return out


def _gather_fn(ctx: Any):
    """One CollectiveGatherV2 in the strategy's group and instance-key sequence, or None if
    this TensorFlow does not expose it the way 2.20-2.21 do. `ReplicaContext.all_gather`
    would first all-gather the shapes: a second collective, which is what this saves."""
    extended = ctx.strategy.extended
    launchers = getattr(getattr(extended, "_cross_device_ops", None), "_launchers", None)
    local_id = getattr(extended, "_get_local_replica_id", None)
    if not launchers or local_id is None:
        return None
    import tensorflow as tf

    replica = tf.get_static_value(ctx.replica_id_in_sync_group)  # a constant tensor inside tf.function
    if replica is None:
        return None
    launcher = launchers[local_id(int(replica))]
    gather = getattr(launcher, "_all_gather", None)
    return None if gather is None else (lambda tensor: gather(tensor, None))


def _mesh_fn(mesh_sum: Callable[[np.ndarray], np.ndarray]):
    """The pack summed by `mesh_sum` in the step's graph: a stateful numpy call, which keeps
    its place between the gradients and the optimizer's update."""
    import tensorflow as tf

    def run(packed):
        total = tf.numpy_function(mesh_sum, [packed], tf.float32, stateful=True, name="gradient_mesh_sum")
        return tf.ensure_shape(total, packed.shape)
    return run
