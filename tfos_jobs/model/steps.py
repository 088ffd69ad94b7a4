"""Training and evaluation steps that communicate only what training needs.

Keras' own steps are correct but chatty under a multi-worker strategy:
  * every step reads every metric's result, and reading a metric under MultiWorkerMirrored
    all-reduces each of its variables (AUC alone has four): about ten collectives per step
    that only feed per-batch logs nobody reads. Keras recomputes the epoch's metrics from
    the (then aggregated) metric variables at the end of every epoch anyway, so the steps
    here return this worker's own values and the epoch logs stay exact;
  * embedding gradients are `IndexedSlices`, which MultiWorkerMirrored all-gathers one by
    one (several collectives each) and a parameter server receives as three tensors each.
    For tables of up to `dense_gradient_limit` values (rows x width) the gradient is made
    dense first, so all of them travel in one packed all-reduce;
  * that all-reduce is a ring of 2 (n - 1) remote transfers one after the other. With
    `gradient_exchange = "all_gather"` the packed gradients travel in one all-gather of n - 1
    transfers and each worker adds them up itself (`model.exchange`); with "mesh" they travel
    over the workers' own connections (`cluster.node.gradient_mesh`), without a collective.
Measured on the census model (docs/benchmarks.md): 113 ms -> 6 ms per two-worker step.

Imports TensorFlow at module load: import it where TensorFlow is already wanted.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfos_jobs.model import exchange
from tfos_jobs.topology import ALL_GATHER, ALL_REDUCE, MESH


class StepModel(tf.keras.Model):
    """A functional model with the steps above; build it with `wrap(model, ...)`."""

    dense_gradient_limit: int = 0
    gradient_exchange: str = ALL_REDUCE  # or ALL_GATHER, MESH: `exchange.summed` instead of the optimizer's sum
    gradient_mesh: Callable[[np.ndarray], np.ndarray] | None = None  # MESH: the run's `Mesh.summed`

    def train_step(self, data: Any) -> dict[str, tf.Tensor]:
        x, y, sample_weight = tf.keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
        variables = self.trainable_variables
        gradients = densify(tape.gradient(loss, variables), variables, self.dense_gradient_limit)
        if self.gradient_exchange in (ALL_GATHER, MESH):
            mesh = self.gradient_mesh if self.gradient_exchange == MESH else None
            if self.gradient_exchange == MESH and mesh is None:
                raise ValueError("the mesh gradient exchange needs the run's mesh (wrap(..., mesh=...))")
            gradients = exchange.summed(gradients, variables, mesh)
            # Keras' optimizers (new and legacy) take this to mean: already summed over workers.
            self.optimizer.apply_gradients(zip(gradients, variables), experimental_aggregate_gradients=False)
        else:
            self.optimizer.apply_gradients(zip(gradients, variables))
        return self.compute_metrics(x, y, y_pred, sample_weight)

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any) -> dict[str, tf.Tensor]:
        self.compiled_metrics.update_state(y, y_pred, sample_weight)
        return {metric.name: local_result(metric) for metric in self.metrics}


def keeps_own_steps(model: tf.keras.Model) -> bool:
    """Whether `model` trains with steps of its own, which `wrap` leaves in place: a subclassed model (no graph of
    layers to re-wrap), or one whose class defines its own `train_step` (a GAN, a contrastive pair, a clipped or
    otherwise custom step). Gradients then cross workers the strategy's own way (all-reduce)."""
    if isinstance(model, StepModel):
        return False
    return not model.inputs or type(model).train_step is not tf.keras.Model.train_step


def wrap(model: tf.keras.Model, dense_gradient_limit: int, gradient_exchange: str = ALL_REDUCE,
         mesh: Callable[[np.ndarray], np.ndarray] | None = None) -> tf.keras.Model:
    """`model` with the steps above, sharing its layers and variables; build and compile the result under the strategy's
    scope. A model that keeps its own steps (`keeps_own_steps`) is returned as it is.
    `mesh`: the run's `Mesh.summed`, for the MESH exchange."""
    if isinstance(model, StepModel):
        model.dense_gradient_limit, model.gradient_exchange = dense_gradient_limit, gradient_exchange
        model.gradient_mesh = mesh
        return model
    if keeps_own_steps(model):
        return model
    wrapped = StepModel(inputs=model.input, outputs=model.output, name=model.name)
    wrapped.dense_gradient_limit, wrapped.gradient_exchange = dense_gradient_limit, gradient_exchange
    wrapped.gradient_mesh = mesh
    # Per-step outputs are this worker's own; none needs reducing across workers.
    wrapped.distribute_reduction_method = "first"
    return wrapped


def densify(gradients: list[Any], variables: list[Any], limit: int) -> list[Any]:
    """Sparse gradients of variables of at most `limit` values, as dense tensors."""
    out = []
    for gradient, variable in zip(gradients, variables):
        size = variable.shape.num_elements()
        if isinstance(gradient, tf.IndexedSlices) and size is not None and size <= limit:
            gradient = tf.convert_to_tensor(gradient)
        out.append(gradient)
    return out


def local_result(metric: tf.keras.metrics.Metric) -> tf.Tensor:
    """The metric's value from this worker's own state, without the cross-worker read that
    `Metric.result()` wraps around it (Keras keeps the plain function as `__wrapped__`)."""
    plain = inspect.unwrap(metric.result)
    return plain() if plain is not metric.result else metric.result()
