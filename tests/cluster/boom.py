"""User model functions that fail, as user code does: used to test failure handling and the checks
before Spark starts."""


def build(spec, vocab, stats, model_cfg):
    raise ValueError("boom: this model function always fails")


def hang(spec, vocab, stats, model_cfg):
    """The census model, but every step on a TF node blocks: a stand-in for a hung worker (the
    driver's dry build, outside any Spark task, gets the model as it is)."""
    return _paused(spec, vocab, stats, model_cfg, seconds=3600, training_only=False)


def steady(spec, vocab, stats, model_cfg):
    """The census model, but every training step on a TF node takes at least 10 ms, whatever
    the cluster's size: a run's phases then last seconds, long enough for a test to act in
    them. Inference (validation, the export) runs at full speed."""
    return _paused(spec, vocab, stats, model_cfg, seconds=0.01, training_only=True)


def _paused(spec, vocab, stats, model_cfg, *, seconds: float, training_only: bool):
    """The census model whose output waits `seconds` on every call on a TF node (only in
    training with `training_only`); the driver's dry build gets the model as it is."""
    import time

    import tensorflow as tf
    from pyspark import TaskContext

    from tfos_jobs.model.builder import build_model

    model = build_model(spec, vocab, stats, model_cfg)
    if TaskContext.get() is None:
        return model

    def pause(x):
        time.sleep(seconds)
        return x

    class Paused(tf.keras.layers.Layer):
        def call(self, t, training=None):
            if training_only and not training:
                return t
            return tf.ensure_shape(tf.py_function(pause, [t], tf.float32), t.shape)

    return tf.keras.Model(model.inputs, Paused()(model.output))


def build_on_nodes(spec, vocab, stats, model_cfg):
    """The census model on the driver's dry build; raises where training runs (a Spark task)."""
    from pyspark import TaskContext

    from tfos_jobs.model.builder import build_model

    if TaskContext.get() is not None:
        raise ValueError("boom: this model function always fails")
    return build_model(spec, vocab, stats, model_cfg)


def tensor(spec, vocab, stats, model_cfg):
    """Returns the output tensor instead of a model."""
    import tensorflow as tf

    inputs = {n: tf.keras.Input(shape=(), dtype=spec.input_dtype(n), name=n) for n in spec.model_inputs}
    numbers = [tf.keras.layers.Reshape((1,))(inputs[f.name]) for f in spec.numeric]
    return tf.keras.layers.Dense(1, activation="sigmoid")(tf.keras.layers.Concatenate()(numbers))


def keras3(spec, vocab, stats, model_cfg):
    """A Keras 3 model (`import keras`), as a model written for Keras 3 alone would be."""
    import keras

    inputs = {n: keras.Input(shape=(1,), name=n) for n in (f.name for f in spec.numeric)}
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(keras.layers.Concatenate()(list(inputs.values()))))


def extra_input(spec, vocab, stats, model_cfg):
    """A model reading a column the spec does not have."""
    import tensorflow as tf

    first = spec.numeric[0].name
    inputs = {first: tf.keras.Input(shape=(), name=first), "shoe_size": tf.keras.Input(shape=(), name="shoe_size")}
    both = tf.keras.layers.Concatenate()([tf.keras.layers.Reshape((1,))(t) for t in inputs.values()])
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(both))


def two_args(spec, vocab):
    """The wrong signature."""
    raise AssertionError("never called")


def train_raises(ctx):
    """A training function that fails as user code does, on every node."""
    raise ValueError(f"boom: this training function always fails (on {ctx.job_name} {ctx.task_index})")


def train_forgets_export(ctx):
    """A training function that trains nothing and never calls ctx.export."""
    ctx.dataset("train")
