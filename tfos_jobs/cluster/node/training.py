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
from typing import Iterator

import numpy as np

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.contracts.metrics import Anomaly, ChiefResult, SamplePredictions
from tfos_jobs.contracts.node_args import STOPPING_METRIC, NodeArgs
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.data import dataset, reader
from tfos_jobs.cluster.node import peers
from tfos_jobs.cluster.node.callbacks import (CHIEF_DEVICE, Publisher, backup_and_restore, epoch_progress,
                                                   first_step, heartbeat)
from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.topology import ALL_REDUCE, Role, Strategy, choose_exchange, examples_per_step


def steps_for(args: NodeArgs, records: int, num_workers: int) -> int:
    """Steps per epoch: as configured, else one pass over the train split.

    A multi-worker step consumes one batch on every worker; a parameter-server step one
    batch on one worker."""
    if args.train.steps_per_epoch:
        return int(args.train.steps_per_epoch)
    return max(1, records // examples_per_step(args.train.strategy, args.train.batch_size, num_workers))


def configure_threads(threads: int) -> int:
    """Size TensorFlow's compute (intra-op) pool to `threads`, or to the Spark task's CPUs when
    0: TensorFlow would otherwise size it to the whole machine, and on a shared host every node
    oversubscribes the cores. Inter-op threads stay TensorFlow's: parameter servers and
    workers block on some of them while they wait for peers. Returns the size set (0: the
    pool was already running, or there is no task to read the CPUs of)."""
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


def make_strategy(name: str, num_workers: int = 1):
    """A one-worker cluster has nothing to all-reduce with: it trains as one process does,
    without MultiWorkerMirrored's per-step collectives. A TF cluster's strategy starts once the
    peers it connects to listen (`peers`)."""
    import tensorflow as tf

    if name == Strategy.MULTI_WORKER_MIRRORED and num_workers > 1:
        peers.await_servers(name)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        # Otherwise every step all-reduces whether each worker still has a batch, to end an
        # epoch together on uneven data: one more collective per step (a quarter of a
        # two-worker step here), and never needed, since training and validation data repeat.
        strategy.extended.experimental_enable_get_next_as_optional = False
        return strategy
    if name == Strategy.PARAMETER_SERVER:
        peers.await_servers(name)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)
    return tf.distribute.get_strategy()


def gradient_exchange_for(args: NodeArgs, num_workers: int, variables: list) -> str:
    """How this run sums gradients across workers (`model.exchange`); ALL_REDUCE where
    nothing crosses workers by all-reduce (one worker, parameter servers), which leaves the
    optimizer's own aggregation in place."""
    if args.train.strategy != Strategy.MULTI_WORKER_MIRRORED or num_workers < 2:
        return ALL_REDUCE
    gradient_bytes = sum(v.shape.num_elements() * v.dtype.size for v in variables)
    return choose_exchange(args.train.gradient_exchange, num_workers, gradient_bytes)


@contextlib.contextmanager
def temp_files_in(directory: str) -> Iterator[None]:
    """The process's temporary files in `directory` while an executor's node or trial trains.

    TensorFlow's autograph writes a source file for every function it converts (Keras's train
    and test steps, the layers' calls, the serving signatures) and deletes it only when the
    interpreter exits normally, which a Spark Python worker never does: in the executor's
    /tmp they piled up, about twenty per node and run. In the workspace they go when the node
    leaves it, or with the reaper when the task is killed."""
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
    from tfos_jobs.model.builder import resolve_model_fn

    return resolve_model_fn(args.train.model.kind)


def pruning(link: DriverLink):
    """A Keras callback that, after each epoch, sends the epoch and its metrics to the driver,
    where a sweep's study and pruner live, and stops a lone node, without exporting, when the
    driver says so (`skip_export`)."""
    import tensorflow as tf

    class Pruning(tf.keras.callbacks.Callback):
        skip_export = False

        def on_epoch_end(self, epoch, logs=None):
            metrics = {k: float(v) for k, v in (logs or {}).items() if np.ndim(v) == 0}  # numpy scalars too
            if link.should_prune(epoch + 1, metrics):
                self.skip_export = True
                self.model.stop_training = True

    return Pruning()


def fit_and_export(args: NodeArgs, *, role: str, worker_index: int, num_workers: int, link: DriverLink, workspace: Workspace,
                   extra_callbacks: tuple = ()) -> dict[str, float]:
    """Train; every worker exports (multi-worker saving is collective), only the chief keeps it
    and publishes it through `link`.

    A callback in `extra_callbacks` that stops training and sets `skip_export` (a sweep's
    early stopping) ends the run without an export."""
    import tensorflow as tf

    from tfos_jobs.model import steps as steps_mod
    from tfos_jobs.model.builder import compile_model
    from tfos_jobs.model.export import export_saved_model

    is_chief = role == Role.CHIEF
    # The same seed on every worker and every run: the same initial weights, so a rerun, or
    # the same data on another filesystem, learns the same model.
    tf.keras.utils.set_random_seed(args.train.seed)
    meta = dataset.read(workspace.dataset)
    spec = meta.spec
    strategy = make_strategy(args.train.strategy, num_workers)
    # Gradients cross processes under MultiWorkerMirrored with several workers and under PS.
    crossing = args.train.strategy == Strategy.PARAMETER_SERVER or (args.train.strategy == Strategy.MULTI_WORKER_MIRRORED and num_workers > 1)
    model_cfg = args.train.model
    build = model_fn_of(args)
    with strategy.scope():
        model = build(spec, meta.vocab, meta.stats, model_cfg)
        gradient_exchange = gradient_exchange_for(args, num_workers, model.trainable_variables)
        trainer = steps_mod.wrap(model, args.train.dense_gradient_limit if crossing else 0, gradient_exchange)
        compile_model(trainer, spec, args.train.optimizer, args.train.learning_rate,
                      steps_per_execution=args.train.steps_per_execution)

    steps = steps_for(args, meta.records(Split.TRAIN), num_workers)
    val_steps = max(1, math.ceil(meta.records(Split.EVAL) / args.train.batch_size))
    train_files, eval_files = meta.files(Split.TRAIN), meta.files(Split.EVAL)

    def fits(split: str, shards: int, index: int) -> bool:
        return reader.shard_bytes(meta.manifest.splits[split].files, shards, index) <= args.train.in_memory_mb * 2**20

    def train_input(shards: int, index: int):
        return reader.make_dataset(train_files, shuffle=True, shuffle_buffer=args.train.shuffle_buffer,
                                   seed=args.train.seed + index, repeat=True, num_shards=shards, shard_index=index,
                                   in_memory=fits(Split.TRAIN, shards, index), spec=spec,
                                   batch_size=args.train.batch_size, compression=meta.compression)

    def named():
        return _naming_corrupt_files(train_files + eval_files, meta.compression, workspace.dataset, args.dataset)

    with named():  # in-memory shards are read here
        if args.train.strategy == Strategy.PARAMETER_SERVER:
            train_data = tf.keras.utils.experimental.DatasetCreator(
                lambda ctx: train_input(ctx.num_input_pipelines, ctx.input_pipeline_id))
        else:
            train_data = _no_autoshard(train_input(num_workers, worker_index))
        # Every worker evaluates the whole eval split: metrics stay exact whatever the sharding.
        eval_data = _no_autoshard(reader.make_dataset(eval_files, spec, args.train.batch_size, compression=meta.compression,
                                                      repeat=True, in_memory=fits(Split.EVAL, 1, 0)))

    per_step = examples_per_step(args.train.strategy, args.train.batch_size, num_workers)
    publisher: Publisher | None = None  # the chief's
    # Backup first, then its publication, then the progress line: callbacks run in order, so an
    # epoch the driver shows is one a relaunch resumes after.
    callbacks: list = [backup_and_restore(workspace.backup, args.train.strategy == Strategy.PARAMETER_SERVER)]
    if is_chief:
        per_batch = args.train.strategy != Strategy.PARAMETER_SERVER
        publisher = Publisher(link, workspace)
        callbacks += [publisher.callback(args.train.tensorboard),
                      epoch_progress(link, args.train.epochs, steps, per_step),
                      first_step(link, per_batch=per_batch),
                      heartbeat(link, per_batch=per_batch)]
    if args.train.tensorboard:
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=workspace.logs))
    stopper = None
    if args.train.early_stopping_patience:  # the model kept (and exported) is the epoch with the lowest val_loss
        stopper = tf.keras.callbacks.EarlyStopping(monitor=STOPPING_METRIC, patience=args.train.early_stopping_patience,
                                                   restore_best_weights=True)
        callbacks.append(stopper)
    callbacks.extend(extra_callbacks)

    try:
        with named():
            history = trainer.fit(train_data, epochs=args.train.epochs, steps_per_epoch=steps, validation_data=eval_data,
                                  validation_steps=val_steps, callbacks=callbacks, verbose=0)
    finally:
        if publisher is not None:
            publisher.finish()
    kept = _kept_epoch(history, stopper)
    final = {k: float(v[kept]) for k, v in history.history.items()}
    if publisher is not None and args.train.tensorboard:
        link.publish(cc.LOGS, workspace.logs)
    if any(getattr(cb, "skip_export", False) for cb in extra_callbacks):
        return final
    parameter_server = args.train.strategy == Strategy.PARAMETER_SERVER
    profile = None
    if args.train.profile_steps and (is_chief or not parameter_server):
        from tfos_jobs.cluster.node import step_profile

        def build_copy():
            copy = steps_mod.wrap(build(spec, meta.vocab, meta.stats, model_cfg), 0)
            return compile_model(copy, spec, args.train.optimizer, args.train.learning_rate,
                                 steps_per_execution=args.train.steps_per_execution)

        workers = num_workers - 1 if parameter_server else num_workers  # PS: the chief only coordinates
        profile = step_profile.measure(
            strategy=strategy, trainer=trainer, build_copy=build_copy, steps=args.train.profile_steps,
            make_input=lambda: train_input(workers, 0 if parameter_server else worker_index),
            steps_per_execution=args.train.steps_per_execution, parameter_server=parameter_server, workers=workers,
            gradient_exchange=gradient_exchange)
    anomaly: Anomaly | None = None
    if spec.is_sequence:  # weights and threshold are constants of the exported graph; only the chief's export is kept
        anomaly = _anomaly(model, train_files, spec, meta.compression, model_cfg, is_chief)
    export_saved_model(model, meta, workspace.saved_model, is_chief=is_chief, anomaly=anomaly,
                       io_device=CHIEF_DEVICE if args.train.strategy == Strategy.PARAMETER_SERVER else None)
    if is_chief:
        link.publish(cc.SAVED_MODEL, workspace.saved_model)
        test = None
        if meta.has_test and args.train.score_test and not spec.is_sequence:
            test_files = meta.files(Split.TEST)
            with _naming_corrupt_files(test_files, meta.compression, workspace.dataset, args.dataset):
                test = _test_metrics(model, test_files, spec, meta.compression, args.train.batch_size)
        link.result(ChiefResult(final=final, test=test, kept_epoch=history.epoch[kept] + 1 if history.epoch else None,
                                epochs_run=len(history.epoch), steps_per_epoch=steps,
                                gradient_exchange=gradient_exchange, step_profile=profile, anomaly=anomaly,
                                sample=_sample_predictions(model, eval_files, spec, meta.compression)))
    return final


def _anomaly(model, train_files: list[str], spec, compression: str, model_cfg, is_chief: bool) -> Anomaly:
    """An autoencoder's sensor weights and threshold, from the train windows (on the chief; the
    other nodes' exports only need the graph's shape)."""
    from tfos_jobs.model.sequence import error_quantile, scoring_model, sensor_scale

    sensors = [f.name for f in spec.sequences]
    quantile, per_sensor = model_cfg.anomaly_quantile, model_cfg.error_scale == "per_sensor"
    if not is_chief:
        return Anomaly(quantile=quantile, threshold=0.0, sensor_scale=dict.fromkeys(sensors, 1.0) if per_sensor else None)
    scale = sensor_scale(model, train_files, spec, compression) if per_sensor else None
    scorer = scoring_model(model, scale)
    threshold = error_quantile(scorer, train_files, spec, compression, quantile)
    return Anomaly(quantile=quantile, threshold=threshold,
                   sensor_scale=dict(zip(sensors, scale)) if scale is not None else None)


def _kept_epoch(history, stopper) -> int:
    """The index in `history` of the epoch whose weights the model holds: the last, or the one
    early stopping restored. A relaunched run's early stopping knows the epochs since the resume
    only (Keras keeps no stopping state in its backup)."""
    if stopper is None or stopper.best_weights is None or stopper.best_epoch not in history.epoch:
        return -1
    return history.epoch.index(stopper.best_epoch)


def _test_metrics(model, files: list[str], spec, compression: str, batch_size: int) -> dict[str, float]:
    """Loss and metrics of the trained model on the held-out test split, on the chief alone
    (read once, after every choice was made on eval)."""
    import tensorflow as tf

    from tfos_jobs.model.builder import loss_and_metrics

    loss_fn, metrics = loss_and_metrics(spec)
    loss = tf.keras.metrics.Mean(name="loss")
    for features, labels in reader.make_dataset(files, spec, max(batch_size, 1024), compression=compression):
        outputs = model(features, training=False)  # eager, as _sample_predictions: any strategy's variables
        loss.update_state(loss_fn(labels, outputs), sample_weight=tf.shape(labels)[0])
        for metric in metrics:
            metric.update_state(labels, outputs)
    return {m.name: float(m.result()) for m in (loss, *metrics)}


def _sample_predictions(model, files: list[str], spec, compression: str, rows: int = 32) -> SamplePredictions:
    """The trained model's outputs on a few eval rows, kept with the rows, so the exported
    SavedModel can be checked against the model that was actually trained."""
    features, _ = next(iter(reader.make_dataset(files, spec, rows, compression=compression)))
    outputs = model(features, training=False)
    decode = lambda t: [v.decode() if isinstance(v, bytes) else v for v in t.numpy().tolist()]
    return SamplePredictions(rows={name: decode(t) for name, t in features.items()}, outputs=outputs.numpy().tolist())


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
