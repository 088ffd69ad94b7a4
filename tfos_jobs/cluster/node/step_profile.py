"""Where a training step's time goes, measured on the TF nodes right after training (`train.profile_steps > 0`; `tfos
bench` sets it). Figures in milliseconds per step, where a step is one batch on one worker:

  input     pulling one batch from this node's input pipeline alone; it overlaps the step
            through prefetching, so it bounds the step from below only when it is the largest
  compute   one step (forward, backward, optimizer update) of the same model and batch in
            this process, with no other node involved: a fresh copy of the model, fed from
            memory
  exchange  the step's communication alone, with tensors of the gradients' shapes:
            MultiWorkerMirrored's sum across workers as training does it (the all-reduce, the
            all-gather of `model.exchange` or the `gradient_mesh`; every worker at once), or, under
            ParameterServerStrategy, reading every variable from the parameter servers and
            sending each an update (every worker at once)
The driver adds `step` (measured in training) and `other` = step - compute - exchange:
dispatch, callbacks and waiting for the slowest worker.

Every MultiWorkerMirrored node must call `measure` (the all-reduce is collective); under
ParameterServerStrategy only the chief does, through its coordinator.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from tfos_jobs.contracts.metrics import StepProfile
from tfos_jobs.model.exchange import summed
from tfos_jobs.topology import ALL_GATHER, ALL_REDUCE, MESH


def measure(*, strategy: Any, trainer: Any, build_copy: Callable[[], Any], make_input: Callable[[], Any],
            steps: int, steps_per_execution: int, parameter_server: bool, workers: int,
            gradient_exchange: str = ALL_REDUCE, mesh: Callable[[Any], Any] | None = None) -> StepProfile:
    """`build_copy()`: the same model, compiled, outside any distribution strategy;
    `make_input()`: this node's training batches; `mesh`: the run's `Mesh.summed` (MESH)."""
    batches = make_input()
    input_ms = _input_ms(batches, steps)
    compute_ms = _compute_ms(build_copy(), batches, steps, steps_per_execution)
    shapes = [(v.shape, v.dtype) for v in trainer.trainable_variables]
    if parameter_server:
        exchange_ms = _parameter_traffic_ms(strategy, trainer.trainable_variables, steps, steps_per_execution, workers)
    elif workers > 1:
        exchange_ms = _gradient_sum_ms(strategy, trainer.trainable_variables, steps, steps_per_execution,
                                       gradient_exchange, mesh)
    else:
        exchange_ms = 0.0
    gradient_bytes = sum(s.num_elements() * d.size for s, d in shapes)
    return StepProfile(input_ms=round(input_ms, 3), compute_ms=round(compute_ms, 3), exchange_ms=round(exchange_ms, 3),
                       gradient_bytes=int(gradient_bytes), variables=len(shapes), profiled_steps=steps,
                       gradient_exchange=gradient_exchange if workers > 1 and not parameter_server else "")


def _input_ms(batches: Any, steps: int) -> float:
    iterator = iter(batches)
    for _ in range(3):
        next(iterator)
    started = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return 1000 * (time.perf_counter() - started) / steps


def _compute_ms(model: Any, batches: Any, steps: int, steps_per_execution: int) -> float:
    """Steps of a non-distributed copy, on batches cached in memory (the input is timed apart)."""
    import tensorflow as tf

    cached = batches.take(min(steps, 20)).cache().repeat()
    seconds: list[float] = []
    timer = tf.keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: seconds.append(-time.perf_counter()),
        on_epoch_end=lambda epoch, logs: seconds.append(seconds.pop() + time.perf_counter()))
    model.fit(cached, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[timer])  # the first epoch traces
    return 1000 * seconds[-1] / steps


def _gradient_sum_ms(strategy: Any, variables: list, steps: int, steps_per_execution: int,
                     gradient_exchange: str, mesh: Callable[[Any], Any] | None) -> float:
    """One sum across workers of zeros shaped like the gradients per step, the way training
    sums them, `steps_per_execution` steps per call, as training runs them."""
    import tensorflow as tf

    def step(total):
        gradients = [tf.zeros(v.shape, v.dtype) + tf.cast(total, v.dtype) for v in variables]
        if gradient_exchange in (ALL_GATHER, MESH):
            reduced = summed(gradients, variables, mesh if gradient_exchange == MESH else None)
        else:
            reduced = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        return tf.cast(tf.reduce_sum(reduced[0]), tf.float32) * 0.0

    @tf.function
    def exchange(n):
        total = tf.constant(0.0)
        for _ in tf.range(n):  # as Keras runs steps_per_execution steps: the loop outside strategy.run
            total = strategy.run(step, args=(total,))
        return total

    return _per_step(lambda n: exchange(tf.constant(n)), steps, steps_per_execution)


def _parameter_traffic_ms(strategy: Any, variables: list, steps: int, steps_per_execution: int,
                          workers: int) -> float:
    """Per worker step: read every variable and add a zero update to it, on every worker at
    once through the chief's coordinator, as training schedules its steps."""
    import tensorflow as tf

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def exchange():
        def body():
            total = tf.constant(0.0)
            for _ in tf.range(steps_per_execution):
                read = tf.add_n([tf.cast(tf.reduce_sum(v), tf.float32) for v in variables])
                for v in variables:
                    v.assign_add(tf.zeros(v.shape, v.dtype) * tf.cast(read * 0.0, v.dtype))
                total += read * 0.0
            return total
        return strategy.run(body)

    calls = max(workers, steps * workers // steps_per_execution)
    for _ in range(workers):  # trace and warm up every worker
        coordinator.schedule(exchange)
    coordinator.join()
    started = time.perf_counter()
    for _ in range(calls):
        coordinator.schedule(exchange)
    coordinator.join()
    interval = (time.perf_counter() - started) / (calls * steps_per_execution)
    return 1000 * interval * workers


def _per_step(call: Callable[[int], Any], steps: int, steps_per_execution: int) -> float:
    call(steps_per_execution)  # trace
    calls = max(1, steps // steps_per_execution)
    started = time.perf_counter()
    for _ in range(calls):
        result = call(steps_per_execution)
    _ = result.numpy() if hasattr(result, "numpy") else result
    return 1000 * (time.perf_counter() - started) / (calls * steps_per_execution)
