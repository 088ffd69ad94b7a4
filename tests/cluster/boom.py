"""A user model function that fails, as user code does: used to test failure handling."""


def build(spec, vocab, stats, model_cfg):
    raise ValueError("boom: this model function always fails")


def hang(spec, vocab, stats, model_cfg):
    """The census model, but every step blocks: a stand-in for a hung worker."""
    import time

    import tensorflow as tf

    from tfos_jobs.model.builder import build_model

    model = build_model(spec, vocab, stats, model_cfg)

    def stall(x):
        time.sleep(3600)
        return x

    out = tf.keras.layers.Lambda(lambda t: tf.ensure_shape(tf.py_function(stall, [t], tf.float32), t.shape))(model.output)
    return tf.keras.Model(model.inputs, out)
