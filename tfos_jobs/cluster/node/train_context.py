"""A training function of the user's on a TF node (`train.fn`): `run` calls `fn(ctx)` with a `TrainContext`, which hands
it what the package's own training uses, so the guarantees hold for it too: the strategy, this worker's shard of the
dataset parsed by the spec and resumed where a relaunch stands, the callbacks that report epochs to the driver, beat,
checkpoint and publish the resume state, a custom loop's steps and checkpoints (`ctx.loop`), and the export.

Under parameter_server the function runs on the chief, which coordinates; the workers and parameter servers serve it.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
from typing import Any, Iterator, Mapping

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.contracts.metrics import ChiefResult, SamplePredictions
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node import checkpoints, trained, training
from tfos_jobs.cluster.node import strategy as node_strategy
from tfos_jobs.cluster.node.callbacks import Publisher, epoch_progress, first_step, heartbeat
from tfos_jobs.cluster.node.checkpoints import CHIEF_DEVICE, Position
from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.data import dataset, reader
from tfos_jobs.topology import ALL_REDUCE, Role, Strategy, examples_per_step

NOT_EXPORTED = "the training function returned without ctx.export(model): there is no model to keep"


def run(args: NodeArgs, *, role: str, index: int, cluster: dict[str, list[str]], worker_index: int, num_workers: int,
        link: DriverLink, workspace: Workspace, extra_callbacks: tuple = (), in_scratch: bool = True) -> None:
    """The training function on this node; `in_scratch`, in its workspace's scratch directory (a relative path it
    writes stays on the node and goes with it: not in the driver's process, whose other threads keep theirs). A
    function that returns without exporting fails the run, saying so."""
    import tensorflow as tf

    from tfos_jobs.model import train_function

    tf.keras.utils.set_random_seed(args.train.seed)
    node = training.NodeTraining(args, role == Role.CHIEF, worker_index, num_workers, link, workspace,
                                 dataset.read(workspace.dataset))
    ctx = TrainContext(node, role=role, index=index, cluster=cluster, extra_callbacks=extra_callbacks)
    fn = _function(args)
    cwd = os.getcwd()
    if in_scratch:
        os.makedirs(workspace.scratch, exist_ok=True)
        os.chdir(workspace.scratch)
    try:
        train_function.call(fn, ctx, dict(args.train.model.params))
    finally:
        os.chdir(cwd)
        ctx.finish_publishing()
    if not ctx.exported and not ctx.pruned:
        raise RuntimeError(NOT_EXPORTED)


def _function(args: NodeArgs) -> Any:
    if args.train_fn is not None:
        from pyspark import cloudpickle

        return cloudpickle.loads(args.train_fn)
    from tfos_jobs.model.train_function import resolve

    return resolve(args.train.fn)


class TrainContext:
    """What `fn(ctx)` gets. TensorFlowOnSpark's context names are here too (`job_name`, `task_index`, `cluster_spec`,
    `num_workers`), so a TFoS `main_fun(args, ctx)` reads them as before."""

    def __init__(self, node: training.NodeTraining, *, role: str, index: int, cluster: dict[str, list[str]],
                 extra_callbacks: tuple = ()):
        self._node, self._extra = node, extra_callbacks
        train, meta = node.args.train, node.meta
        self.job_name, self.task_index, self.cluster_spec = role, index, cluster
        self.num_workers, self.worker_index, self.is_chief = node.num_workers, node.worker_index, node.is_chief
        self.spec, self.vocab, self.stats = meta.spec, meta.vocab, meta.stats
        self.params: Mapping[str, Any] = train.model.params  # [train.model.params]
        self.epochs, self.batch_size = train.epochs, train.batch_size
        self.steps_per_epoch = training.steps_for(node.args, meta.records(Split.TRAIN), node.num_workers)
        self.validation_steps = max(1, math.ceil(meta.records(Split.EVAL) / train.batch_size))
        # where a relaunch resumes: a custom loop's checkpoint, else Keras's (what ctx.dataset skips)
        self.resumed = _loop_position(node.workspace.backup) or checkpoints.resume_position(
            node.workspace.backup, self.steps_per_epoch, step_checkpoints=node.checkpoint_calls > 0)
        self._strategy: Any = None
        self._callbacks: training.Callbacks | None = None
        self._loop: Loop | None = None
        self._history: Any = None
        self.exported = False

    @property
    def strategy(self) -> Any:
        """The run's tf.distribute strategy, made on first use (a function that makes its own, as a TFoS program does,
        never makes two: TF_CONFIG is set either way)."""
        if self._strategy is None:
            self._strategy = node_strategy.make_strategy(self._node.args.train.strategy, self.num_workers)
        return self._strategy

    @property
    def pruned(self) -> bool:
        """A sweep's pruner stopped this trial: it ends without an export."""
        return any(getattr(cb, "skip_export", False) for cb in self._extra)

    def dataset(self, split: str = Split.TRAIN.value, *, batch_size: int | None = None) -> Any:
        """The split's (features dict, label) batches of `batch_size` (default train.batch_size), parsed by the spec,
        repeated. `train` is this worker's shard, shuffled, from where a relaunch resumes (under parameter_server a
        `DatasetCreator` giving each worker its own); `eval` and `test` are whole on every worker."""
        if split not in (Split.TRAIN, Split.EVAL, Split.TEST):
            raise ValueError(f"ctx.dataset: no split {split!r}; one of train, eval, test")
        node = self._node
        if batch_size is not None:
            args = dataclasses.replace(node.args, train=dataclasses.replace(node.args.train, batch_size=batch_size))
            node = dataclasses.replace(node, args=args)
        if split == Split.TEST:
            if not node.meta.has_test:
                raise ValueError(f"ctx.dataset: {node.args.dataset} has no test split")
            meta, files = node.meta, node.meta.files(Split.TEST)
            return reader.make_dataset(files, meta.spec, node.args.train.batch_size, compression=meta.compression,
                                       repeat=True)
        skip = 0 if node.parameter_server else self.resumed.batches(self.steps_per_epoch)
        inputs = training.input_pipelines(node, skip=skip)
        return inputs.train if split == Split.TRAIN else inputs.eval

    def callbacks(self) -> list:
        """For `model.fit(..., callbacks=ctx.callbacks())`: the resume state (step checkpoints), the epoch lines on the
        driver, the first step, heartbeats, TensorBoard, early stopping when set, a sweep's pruner."""
        import tensorflow as tf

        self._callbacks = training.training_callbacks(self._node, self.steps_per_epoch, self.resumed, self._extra)
        self._history = tf.keras.callbacks.History()  # fit's own (it adds none): the run's epochs, whatever is exported
        return [*self._callbacks.all, self._history]

    def loop(self, *, model: Any, optimizer: Any) -> "Loop":
        """A custom training loop's epochs and steps (`tf.GradientTape`), with fit's guarantees (`Loop`)."""
        self._loop = Loop(self, model, optimizer)
        return self._loop

    def export(self, model: Any, *, signatures: Any = None) -> None:
        """Save the model, on every worker (multi-worker saving is collective); the chief's copy is the run's model.

        A model over the spec's columns is exported as the package exports its own (its serving signatures and the
        dataset's spec, vocabularies and statistics in its assets: `register` serves it by name). Any other model, or
        one given `signatures`, is saved with those (Keras's own serving signature when none): `register(...,
        signature=...)` serves it."""
        node = self._node
        self.finish_publishing()
        if self._node.is_chief and node.args.train.tensorboard and os.path.isdir(node.workspace.logs):
            node.link.publish(cc.LOGS, node.workspace.logs)
        ours = signatures is None and _over_spec_columns(model, node.meta.spec.model_inputs)
        io_device = CHIEF_DEVICE if node.parameter_server else None
        if ours:
            from tfos_jobs.model.export import export_saved_model

            export_saved_model(model, node.meta, node.workspace.saved_model, is_chief=node.is_chief,
                               io_device=io_device)
        else:
            _save(model, node.workspace.saved_model if node.is_chief else None, signatures, io_device)
        self.exported = True
        if node.is_chief:
            node.link.publish(cc.SAVED_MODEL, node.workspace.saved_model)
            node.link.result(self._result(model, ours))

    def finish_publishing(self) -> None:
        for publisher in (self._callbacks.publisher if self._callbacks else None,
                          self._loop.publisher if self._loop else None):
            if publisher is not None:
                publisher.finish()

    def _result(self, model: Any, ours: bool) -> ChiefResult:
        node, meta = self._node, self._node.meta
        history = self._loop.history if self._loop is not None else self._history or getattr(model, "history", None)
        epochs = list(getattr(history, "epoch", []) or [])
        stopper = self._callbacks.stopper if self._callbacks is not None else None
        kept = trained.kept_epoch(history, stopper) if history is not None and epochs else None
        final = {k: float(v[kept]) for k, v in history.history.items()} if history is not None and kept is not None \
            else {}
        crossing = node.args.train.strategy != Strategy.LOCAL and node.num_workers > 1
        sample = (trained.sample_predictions(model, meta.files(Split.EVAL), meta.spec, meta.compression) if ours
                  else SamplePredictions(rows={}, outputs=[]))
        return ChiefResult(final=final, test=None, kept_epoch=epochs[kept] + 1 if kept is not None else None,
                           epochs_run=len(epochs), steps_per_epoch=self.steps_per_epoch,
                           gradient_exchange=ALL_REDUCE if crossing else "", step_profile=None, anomaly=None,
                           sample=sample)


def _over_spec_columns(model: Any, columns: tuple[str, ...] | list[str]) -> bool:
    """Whether `model` reads a dict of the spec's columns, as the package's models do."""
    from tfos_jobs.model.builder import input_names

    names = input_names(model) if hasattr(model, "inputs") else None
    return names is not None and bool(names) and isinstance(getattr(model, "input", None), dict) \
        and set(names) <= set(columns)


def _save(model: Any, path: str | None, signatures: Any, io_device: str | None) -> None:
    """Save with `signatures` to `path` (None: a scratch directory, removed after: a non-chief worker's copy)."""
    import tensorflow as tf

    target = path or tempfile.mkdtemp(prefix="tfos-export-")
    options = tf.saved_model.SaveOptions(experimental_io_device=io_device) if io_device else None
    try:
        if isinstance(model, tf.keras.Model):
            model.save(target, save_format="tf", signatures=signatures, include_optimizer=False, options=options)
        else:
            tf.saved_model.save(model, target, signatures=signatures, options=options)
    finally:
        if path is None:
            shutil.rmtree(target, ignore_errors=True)


class _History:
    """A custom loop's epochs and their metrics, as Keras's History keeps them."""

    def __init__(self) -> None:
        self.epoch: list[int] = []
        self.history: dict[str, list[float]] = {}

    def add(self, epoch: int, metrics: Mapping[str, float]) -> None:
        self.epoch.append(epoch)
        for k, v in metrics.items():
            self.history.setdefault(k, []).append(float(v))


class Loop:
    """A custom loop's epochs and steps with the guarantees fit has: where a relaunch resumes (the model, the optimizer
    and the position checkpointed every train.checkpoint_steps steps and at each epoch's end, the data skipped to
    there), heartbeats and the first step reported, an epoch line on the driver per epoch::

        loop = ctx.loop(model=model, optimizer=optimizer)
        batches = loop.batches(ctx.dataset("train"))
        for epoch in loop.epochs():
            for step in loop.steps():
                loop.record(loss=loop.schedule(train_step, batches))   # train_step(batches) -> the step's loss
            loop.end_epoch(val_loss=...)

    `steps` yields this epoch's step numbers (after a resume, the ones left); `record` averages metrics over the
    epoch; `end_epoch` checkpoints and reports the epoch with the averages and the metrics given to it.

    `batches` and `schedule` let one loop run under every strategy: under multi_worker_mirrored and local, the
    strategy's distributed iterator and a call; under parameter_server, each worker's iterator and a step scheduled on
    a free worker by the coordinator (the chief runs the loop), its result fetched at the epoch's end, after every
    scheduled step has run. Parameter-server training checkpoints at each epoch's end only (its steps run
    asynchronously on the workers: there is no one step position to resume from)."""

    def __init__(self, ctx: TrainContext, model: Any, optimizer: Any):
        import tensorflow as tf

        self._ctx, node = ctx, ctx._node
        self._node = node
        self._steps = ctx.steps_per_epoch
        self._strategy = ctx.strategy
        self._coordinator = None
        if node.parameter_server:
            self._coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self._strategy)
            if hasattr(optimizer, "build"):  # its slots on the parameter servers before any step is scheduled
                with self._strategy.scope():
                    optimizer.build(model.trainable_variables)
        self._every = 0 if node.parameter_server else node.args.train.checkpoint_interval()
        self._options = tf.train.CheckpointOptions(experimental_io_device=CHIEF_DEVICE) if node.parameter_server \
            else None
        self._epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self._epoch_var,
                                               step=self._step_var)
        self._dir = os.path.join(node.workspace.backup, LOOP_CHECKPOINTS)
        latest = tf.train.latest_checkpoint(self._dir)
        if latest is not None:
            self._checkpoint.read(latest, options=self._options).expect_partial()
        self.position = Position(int(self._epoch_var.numpy()), int(self._step_var.numpy()))
        self.history = _History()
        self.publisher = Publisher(node.link, node.workspace) if node.is_chief else None
        train = node.args.train
        done = self.position.batches(self._steps)
        per_step = examples_per_step(train.strategy, train.batch_size, node.num_workers)
        self._reports = [epoch_progress(node.link, train.epochs, self._steps, per_step, self.position),
                         first_step(node.link, done), heartbeat(node.link, self._steps, done)] if node.is_chief else []
        self._sums: dict[str, float] = {}
        self._count = 0
        self._scheduled: list[tuple[str, Any]] = []  # parameter_server: metrics not yet fetched
        self._epoch = self.position.epoch

    @property
    def resumed_batches(self) -> int:
        """The batches trained before this attempt: what a relaunch skips of this worker's train shard."""
        return self.position.batches(self._steps)

    def batches(self, dataset: Any) -> Any:
        """An iterator over `ctx.dataset(...)`'s batches for `schedule`'s steps: the strategy's distributed one (each
        replica its part), or under parameter_server each worker's own."""
        if self._coordinator is None:
            return iter(self._strategy.experimental_distribute_dataset(dataset))
        strategy = self._strategy

        def per_worker() -> Any:
            return strategy.distribute_datasets_from_function(dataset, options=getattr(dataset, "input_options", None))

        return iter(self._coordinator.create_per_worker_dataset(per_worker))

    def schedule(self, step: Any, *args: Any) -> Any:
        """`step(*args)` now (its result), or under parameter_server on a free worker (a result `record` fetches at
        the epoch's end)."""
        if self._coordinator is None:
            return step(*args)
        return self._coordinator.schedule(step, args=args)

    def epochs(self) -> Iterator[int]:
        for epoch in range(self.position.epoch, self._node.args.train.epochs):
            self._epoch, self._sums, self._count = epoch, {}, 0
            for cb in self._reports:
                cb.on_epoch_begin(epoch)
            yield epoch

    def steps(self) -> Iterator[int]:
        first = self.position.step if self._epoch == self.position.epoch else 0
        for step in range(first, self._steps):
            yield step
            for cb in self._reports:
                if hasattr(cb, "on_train_batch_end"):
                    cb.on_train_batch_end(step)
            if self._every and (step + 1) % self._every == 0 and step + 1 < self._steps:
                self._save(self._epoch, step + 1)
                if self.publisher is not None:
                    self.publisher.step_checkpoint()

    def record(self, **metrics: Any) -> None:
        """This step's metrics (tensors or numbers), averaged over the epoch in its line."""
        for k, v in metrics.items():
            if hasattr(v, "fetch"):  # scheduled on a worker: fetched once the epoch's steps have run
                self._scheduled.append((k, v))
            else:
                self._sums[k] = self._sums.get(k, 0.0) + float(v)
        self._count += 1

    def end_epoch(self, **metrics: Any) -> None:
        """The epoch's checkpoint, published before its line reaches the driver (a relaunch resumes after it)."""
        if self._coordinator is not None:
            self._coordinator.join()
            for k, v in self._scheduled:
                self._sums[k] = self._sums.get(k, 0.0) + float(v.fetch())
            self._scheduled = []
        averages = {k: v / max(self._count, 1) for k, v in self._sums.items()}
        logs = {**averages, **{k: float(v) for k, v in metrics.items()}}
        self._save(self._epoch + 1, 0)
        if self.publisher is not None:
            self.publisher.publish_backup()
        for cb in self._reports:
            cb.on_epoch_end(self._epoch, logs)
        self.history.add(self._epoch, logs)

    def _save(self, epoch: int, step: int) -> None:
        """Every worker writes (saving is collective); the chief's copy is the resume state."""
        self._epoch_var.assign(epoch)
        self._step_var.assign(step)
        if self._node.is_chief:
            _write_newest(self._checkpoint, self._dir, f"ckpt-{epoch}-{step}", self._options)
        else:
            scratch = tempfile.mkdtemp(prefix="tfos-loop-")
            try:
                self._checkpoint.write(os.path.join(scratch, "ckpt"))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)


LOOP_CHECKPOINTS = "loop"  # a custom loop's checkpoints, inside the node's backup directory
_LOOP_EPOCH, _LOOP_STEP = "epoch/.ATTRIBUTES/VARIABLE_VALUE", "step/.ATTRIBUTES/VARIABLE_VALUE"


def _loop_position(backup_dir: str) -> Position | None:
    """Where a custom loop's newest checkpoint stands (the next epoch and step it trains), None without one."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(os.path.join(backup_dir, LOOP_CHECKPOINTS))
    if latest is None:
        return None
    saved = tf.train.load_checkpoint(latest)
    return Position(int(saved.get_tensor(_LOOP_EPOCH)), int(saved.get_tensor(_LOOP_STEP)))


def _write_newest(checkpoint: Any, directory: str, name: str, options: Any = None) -> None:
    """`checkpoint` written as `name`, named newest in `directory`'s `checkpoint` file, the older ones removed. No
    CheckpointManager: its save counter is a variable only the chief would create, and under a strategy's scope every
    worker must create the same variables."""
    import tensorflow as tf

    os.makedirs(directory, exist_ok=True)
    older = {n.split(".")[0] for n in os.listdir(directory) if n.startswith("ckpt-")} - {name}
    checkpoint.write(os.path.join(directory, name), options=options)
    tf.compat.v1.train.update_checkpoint_state(directory, name, all_model_checkpoint_paths=[name])
    for entry in os.listdir(directory):
        if entry.split(".")[0] in older:
            os.remove(os.path.join(directory, entry))
