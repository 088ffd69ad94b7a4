"""Build, fit and export the model on one TF node (or in one process for `local`).

Everything comes from `args` (plain values) and the dataset's `_meta/`: the spec, vocabularies
and statistics the model is built from are the ones the records were written with. The node
reads and writes its local workspace only (`contracts.workspace`); what must outlive it (epoch
progress, resume state, logs, the SavedModel, the result) goes to the driver over `link`.
"""
from __future__ import annotations

import contextlib
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.contracts.metrics import Anomaly, ChiefResult, StepProfile
from tfos_jobs.contracts.node_args import STOPPING_METRIC, NodeArgs
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.data import dataset, reader
from tfos_jobs.cluster.node import checkpoints, gradient_mesh, trained
from tfos_jobs.cluster.node import strategy as node_strategy
from tfos_jobs.cluster.node.callbacks import Publisher, epoch_progress, first_step, heartbeat
from tfos_jobs.cluster.node.checkpoints import CHIEF_DEVICE, Position
from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.topology import ALL_REDUCE, MESH, Role, Strategy, examples_per_step


def steps_for(args: NodeArgs, records: int, num_workers: int) -> int:
    """Steps per epoch: as configured, else one pass over the train split.

    A multi-worker step consumes one batch on every worker; a parameter-server step one batch on one worker."""
    if args.train.steps_per_epoch:
        return int(args.train.steps_per_epoch)
    return max(1, records // examples_per_step(args.train.strategy, args.train.batch_size, num_workers))


def configure_threads(threads: int) -> int:
    """Size TensorFlow's compute (intra-op) pool to `threads`, or to the Spark task's CPUs when 0: TensorFlow would
    otherwise size it to the whole machine, and on a shared host every node oversubscribes the cores. Inter-op threads
    stay TensorFlow's: parameter servers and workers block on some of them while they wait for peers. Returns the size
    set (0: the pool was already running, or there is no task to read the CPUs of)."""
    import tensorflow as tf

    if threads <= 0:
        from pyspark import TaskContext

        task = TaskContext.get()
        threads = task.cpus() if task is not None else 0
    if threads <= 0:
        return 0
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:  # TensorFlow already runs in this process: keep what it has
        return 0
    return threads


@contextlib.contextmanager
def temp_files_in(directory: str) -> Iterator[None]:
    """The process's temporary files in `directory` while an executor's node or trial trains.

    TensorFlow's autograph writes a source file for every function it converts (Keras's train and test steps, the
    layers' calls, the serving signatures) and deletes it only when the interpreter exits normally, which a Spark Python
    worker never does: in the executor's /tmp they piled up, about twenty per node and run. In the workspace they go
    when the node leaves it, or with the reaper when the task is killed."""
    os.makedirs(directory, exist_ok=True)
    previous = tempfile.tempdir
    tempfile.tempdir = directory
    try:
        yield
    finally:
        tempfile.tempdir = previous


def model_fn_of(args: NodeArgs):
    """The model function: the callable the driver pickled (`NodeArgs.model_fn`), else `train.model.kind`."""
    if args.model_fn is not None:
        from pyspark import cloudpickle

        return cloudpickle.loads(args.model_fn)
    from tfos_jobs.model.builder import resolve_build

    return resolve_build(args.train.model.kind)


def pruning(link: DriverLink):
    """A Keras callback that, after each epoch, sends the epoch and its metrics to the driver, where a sweep's study and
    pruner live, and stops a lone node, without exporting, when the driver says so (`skip_export`)."""
    import tensorflow as tf

    class Pruning(tf.keras.callbacks.Callback):
        skip_export = False

        def on_epoch_end(self, epoch, logs=None):
            metrics = {k: float(v) for k, v in (logs or {}).items() if np.ndim(v) == 0}  # numpy scalars too
            if link.should_prune(epoch + 1, metrics):
                self.skip_export = True
                self.model.stop_training = True

    return Pruning()


@dataclass(frozen=True)
class NodeTraining:
    """What every step of one node's training reads: its arguments, its place in the cluster,
    its line to the driver, its workspace and the dataset's metadata."""

    args: NodeArgs
    is_chief: bool
    worker_index: int  # among the workers that take training steps
    num_workers: int
    link: DriverLink
    workspace: Workspace
    meta: dataset.DatasetMeta
    ports: tuple[int, ...] = ()  # the node's share of train.tf_ports, for its gradient mesh

    @property
    def parameter_server(self) -> bool:
        return self.args.train.strategy == Strategy.PARAMETER_SERVER

    @property
    def checkpoint_calls(self) -> int:
        """Keras callback calls between step checkpoints (0: at epoch ends only)."""
        train = self.args.train
        return train.checkpoint_interval() // train.steps_per_execution

    def naming_corrupt_files(self, files: list[str]) -> contextlib.AbstractContextManager[None]:
        return _naming_corrupt_files(files, self.meta.compression, self.workspace.dataset, self.args.dataset)


@dataclass(frozen=True)
class BuiltModel:
    """The model as the run's strategy built it, and what fitting, profiling and export use of it."""

    strategy: Any
    model: Any  # what is exported
    trainer: Any  # the model with the run's training step (model.steps), compiled
    gradient_exchange: str  # topology.MESH, ALL_GATHER or ALL_REDUCE
    build: Callable[..., Any]  # the model function, for the step profile's copy
    mesh: gradient_mesh.Mesh | None  # MESH: this worker's connections to the others (closed by fit_and_export)


@dataclass(frozen=True)
class Inputs:
    """This worker's input pipelines, and a maker of train shards for the step profile."""

    train: Any  # a tf.data.Dataset, or under PS a DatasetCreator
    eval: Any
    train_shard: Callable[[int, int], Any]  # (shards, index) -> that shard's training batches
    train_files: list[str]
    eval_files: list[str]


@dataclass(frozen=True)
class Callbacks:
    """Keras's callbacks in the order they run, and those read again once fit returns."""

    all: list
    publisher: Publisher | None  # the chief's
    stopper: Any  # early stopping, when train.early_stopping_patience is set


def fit_and_export(args: NodeArgs, *, role: str, worker_index: int, num_workers: int, link: DriverLink,
                   workspace: Workspace, extra_callbacks: tuple = (), ports: tuple[int, ...] = ()) -> dict[str, float]:
    """Train; every worker exports (multi-worker saving is collective), only the chief keeps it
    and publishes it through `link`. Returns the metrics of the epoch whose model is kept.

    A callback in `extra_callbacks` that stops training and sets `skip_export` (a sweep's
    early stopping) ends the run without an export. `ports`: the node's share of train.tf_ports,
    where its gradient mesh listens (empty: any free port)."""
    import tensorflow as tf

    # The same seed on every worker and every run: the same initial weights, so a rerun, or
    # the same data on another filesystem, learns the same model.
    tf.keras.utils.set_random_seed(args.train.seed)
    node = NodeTraining(args, role == Role.CHIEF, worker_index, num_workers, link, workspace,
                        dataset.read(workspace.dataset), ports)
    built = build_model(node)
    try:
        return _fit_and_export(node, built, extra_callbacks)
    finally:
        if built.mesh is not None:
            built.mesh.close()


def _fit_and_export(node: NodeTraining, built: BuiltModel, extra_callbacks: tuple) -> dict[str, float]:
    args, link, workspace, num_workers = node.args, node.link, node.workspace, node.num_workers
    steps = steps_for(args, node.meta.records(Split.TRAIN), num_workers)
    resumed = checkpoints.resume_position(workspace.backup, steps, step_checkpoints=node.checkpoint_calls > 0)
    inputs = input_pipelines(node, skip=0 if node.parameter_server else resumed.batches(steps))
    callbacks = training_callbacks(node, steps, resumed, extra_callbacks)
    history = fit(node, built, inputs, callbacks, steps)
    kept = trained.kept_epoch(history, callbacks.stopper)
    final = {k: float(v[kept]) for k, v in history.history.items()}
    if node.is_chief and args.train.tensorboard:
        link.publish(cc.LOGS, workspace.logs)
    if any(getattr(cb, "skip_export", False) for cb in extra_callbacks):
        return final
    profile = profile_steps(node, built, inputs)
    anomaly = export(node, built, inputs)
    if node.is_chief:
        link.publish(cc.SAVED_MODEL, workspace.saved_model)
        test = score_test_split(node, built)
        link.result(ChiefResult(final=final, test=test, kept_epoch=history.epoch[kept] + 1 if history.epoch else None,
                                epochs_run=len(history.epoch), steps_per_epoch=steps,
                                gradient_exchange=built.gradient_exchange, step_profile=profile, anomaly=anomaly,
                                sample=trained.sample_predictions(built.model, inputs.eval_files, node.meta.spec,
                                                                  node.meta.compression)))
    return final


def build_model(node: NodeTraining) -> BuiltModel:
    """The model built and compiled under the run's strategy, with its training step."""
    from tfos_jobs.model import steps as steps_mod
    from tfos_jobs.model.builder import compile_for_training

    train, meta = node.args.train, node.meta
    strategy = node_strategy.make_strategy(train.strategy, node.num_workers)
    # Gradients cross processes under MultiWorkerMirrored with several workers and under PS.
    crossing = node.parameter_server or (train.strategy == Strategy.MULTI_WORKER_MIRRORED and node.num_workers > 1)
    build = model_fn_of(node.args)
    with strategy.scope():
        model = build(meta.spec, meta.vocab, meta.stats, train.model)
        gradient_exchange = ALL_REDUCE if steps_mod.keeps_own_steps(model) else \
            node_strategy.gradient_exchange_for(node.args, node.num_workers, model.trainable_variables)
        mesh = (node_strategy.open_mesh(strategy, node.link, node.args.train.step_timeout, node.worker_index, node.ports)
                if gradient_exchange == MESH else None)
        trainer = steps_mod.wrap(model, train.dense_gradient_limit if crossing else 0, gradient_exchange,
                                 mesh.summed if mesh is not None else None)
        compile_for_training(trainer, model, meta.spec, train.optimizer, train.learning_rate,
                             steps_per_execution=train.steps_per_execution)
    return BuiltModel(strategy, model, trainer, gradient_exchange, build, mesh)


def input_pipelines(node: NodeTraining, skip: int = 0) -> Inputs:
    """This worker's shard of the train split, from its `skip`th batch (what a resumed run trained already), and the
    whole eval split: every worker evaluates all of it, so the metrics stay exact whatever the sharding."""
    import tensorflow as tf

    train, meta = node.args.train, node.meta
    train_files, eval_files = meta.files(Split.TRAIN), meta.files(Split.EVAL)

    def fits(split: str, shards: int, index: int) -> bool:
        return reader.shard_bytes(meta.manifest.splits[split].files, shards, index) <= train.in_memory_mb * 2**20

    def train_shard(shards: int, index: int, skip: int = 0):
        return reader.make_dataset(train_files, shuffle=True, shuffle_buffer=train.shuffle_buffer,
                                   seed=train.seed + index, repeat=True, num_shards=shards, shard_index=index,
                                   in_memory=fits(Split.TRAIN, shards, index), spec=meta.spec,
                                   batch_size=train.batch_size, compression=meta.compression, skip_batches=skip)

    with node.naming_corrupt_files(train_files + eval_files):  # in-memory shards are read here
        if node.parameter_server:
            train_data = tf.keras.utils.experimental.DatasetCreator(
                lambda ctx: train_shard(ctx.num_input_pipelines, ctx.input_pipeline_id))
        else:
            train_data = _no_autoshard(train_shard(node.num_workers, node.worker_index, skip))
        eval_data = _no_autoshard(reader.make_dataset(eval_files, meta.spec, train.batch_size, compression=meta.compression,
                                                      repeat=True, in_memory=fits(Split.EVAL, 1, 0)))
    return Inputs(train_data, eval_data, train_shard, train_files, eval_files)


def training_callbacks(node: NodeTraining, steps: int, resumed: Position, extra_callbacks: tuple) -> Callbacks:
    """Backup first, then its publication, then the progress line: callbacks run in order, so an
    epoch the driver shows is one a relaunch resumes after."""
    import tensorflow as tf

    train, link = node.args.train, node.link
    per_step = examples_per_step(train.strategy, train.batch_size, node.num_workers)
    publisher = Publisher(link, node.workspace) if node.is_chief else None
    callbacks: list = [checkpoints.backup_and_restore(
        node.workspace.backup, parameter_server=node.parameter_server, every_calls=node.checkpoint_calls,
        steps_per_epoch=steps, saved=publisher.step_checkpoint if publisher is not None else None)]
    if publisher is not None:
        per_batch, done = not node.parameter_server, resumed.batches(steps)
        callbacks += [publisher.callback(train.tensorboard),
                      epoch_progress(link, train.epochs, steps, per_step, resumed),
                      first_step(link, done, per_batch=per_batch),
                      heartbeat(link, steps, done, per_batch=per_batch)]
    if train.tensorboard:
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=node.workspace.logs))
    stopper = None
    if train.early_stopping_patience:  # the model kept (and exported) is the epoch with the lowest val_loss
        stopper = tf.keras.callbacks.EarlyStopping(monitor=STOPPING_METRIC, patience=train.early_stopping_patience,
                                                   restore_best_weights=True)
        callbacks.append(stopper)
    callbacks.extend(extra_callbacks)
    return Callbacks(callbacks, publisher, stopper)


def fit(node: NodeTraining, built: BuiltModel, inputs: Inputs, callbacks: Callbacks, steps: int):
    """Keras's fit, to the end or to a stop; returns its History. The chief's publisher ends with it."""
    train = node.args.train
    val_steps = max(1, math.ceil(node.meta.records(Split.EVAL) / train.batch_size))
    try:
        with node.naming_corrupt_files(inputs.train_files + inputs.eval_files):
            return built.trainer.fit(inputs.train, epochs=train.epochs, steps_per_epoch=steps, validation_data=inputs.eval,
                                     validation_steps=val_steps, callbacks=callbacks.all, verbose=0)
    finally:
        if callbacks.publisher is not None:
            callbacks.publisher.finish()


def profile_steps(node: NodeTraining, built: BuiltModel, inputs: Inputs) -> StepProfile | None:
    """With train.profile_steps, where a step's time goes (cluster.node.step_profile): every
    MultiWorkerMirrored node takes part; under PS the chief, which coordinates."""
    train, meta = node.args.train, node.meta
    if not train.profile_steps or not (node.is_chief or not node.parameter_server):
        return None
    from tfos_jobs.cluster.node import step_profile
    from tfos_jobs.model import steps as steps_mod
    from tfos_jobs.model.builder import compile_for_training

    def build_copy():
        model = built.build(meta.spec, meta.vocab, meta.stats, train.model)
        return compile_for_training(steps_mod.wrap(model, 0), model, meta.spec, train.optimizer, train.learning_rate,
                                    steps_per_execution=train.steps_per_execution)

    parameter_server = node.parameter_server
    workers = node.num_workers - 1 if parameter_server else node.num_workers  # PS: the chief only coordinates
    return step_profile.measure(
        strategy=built.strategy, trainer=built.trainer, build_copy=build_copy, steps=train.profile_steps,
        make_input=lambda: inputs.train_shard(workers, 0 if parameter_server else node.worker_index),
        steps_per_execution=train.steps_per_execution, parameter_server=parameter_server, workers=workers,
        gradient_exchange=built.gradient_exchange, mesh=built.mesh.summed if built.mesh is not None else None)


def export(node: NodeTraining, built: BuiltModel, inputs: Inputs) -> Anomaly | None:
    """The SavedModel into the workspace, on every worker (multi-worker saving is collective);
    a sensor model's anomaly threshold with it (None for other models)."""
    from tfos_jobs.model.export import export_saved_model

    meta = node.meta
    anomaly: Anomaly | None = None
    if meta.spec.is_sequence:  # weights and threshold are constants of the exported graph; only the chief's export is kept
        anomaly = trained.anomaly(built.model, inputs.train_files, meta.spec, meta.compression, node.args.train.model,
                           node.is_chief)
    export_saved_model(built.model, meta, node.workspace.saved_model, is_chief=node.is_chief, anomaly=anomaly,
                       io_device=CHIEF_DEVICE if node.parameter_server else None)
    return anomaly


def score_test_split(node: NodeTraining, built: BuiltModel) -> dict[str, float] | None:
    """The held-out test split scored once, on the chief, when the dataset has one and
    train.score_test asks (sensor models are judged by `tfos evaluate` instead)."""
    meta = node.meta
    if not (meta.has_test and node.args.train.score_test and not meta.spec.is_sequence):
        return None
    files = meta.files(Split.TEST)
    with node.naming_corrupt_files(files):
        return trained.split_metrics(built.model, files, meta.spec, meta.compression, node.args.train.batch_size)


@contextlib.contextmanager
def _naming_corrupt_files(files: list[str], compression: str, local_root: str, dataset: str):
    """TensorFlow reports a damaged record without its file: find the file and name it, as it
    is named on storage (`files` are local copies under `local_root` of `dataset`'s files)."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.DataLossError as e:
        bad = reader.find_corrupt([f for f in files if os.path.exists(f)], compression)
        where = f"{dataset}{bad[0][len(local_root):]} ({bad[1]})" if bad else f"one of the files of {dataset}"
        raise reader.CorruptRecordsError(f"corrupt TFRecord file: {where}; prepare the dataset again") from e


def _no_autoshard(ds):
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)
