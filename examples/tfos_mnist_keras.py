# TensorFlowOnSpark's Keras example (examples/mnist/keras/mnist_tf.py at yahoo/TensorFlowOnSpark f9c3e5e, Apache
# License 2.0, Copyright Yahoo Inc.), moved to tfos_jobs. `main_fun(args, ctx)` has two kinds of edit: its data (the
# digits scikit-learn ships, prepared as TFRecords, in place of a download of MNIST) and its export (ctx.export); the
# `__main__` part starts the run with tfos_jobs instead of TFCluster. docs/training.md shows the diff.
#
#   .venv/bin/python examples/tfos_mnist_keras.py --work /tmp/mnist --epochs 3
# Adapted from: https://www.tensorflow.org/beta/tutorials/distribute/multi_worker_with_keras

from __future__ import absolute_import, division, print_function, unicode_literals


def main_fun(args, ctx):
  import tensorflow as tf

  strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()

  BUFFER_SIZE = args.buffer_size
  BATCH_SIZE = args.batch_size
  NUM_WORKERS = args.cluster_size

  # Scaling MNIST data from (0, 255] to (0., 1.]
  def scale(image, label):
    return tf.cast(image, tf.float32) / 255, label

  # the digits, prepared: this worker's shard, 8x8 pixels of 0..16 made MNIST's 28x28 of 0..255
  def image(features, label):
    return tf.image.resize(tf.reshape(features["pixels"], (8, 8, 1)) * 16.0, (28, 28)), label
  datasets = ctx.dataset("train").unbatch().map(image)
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
  train_datasets_unbatched = datasets.with_options(options).repeat().map(scale).shuffle(BUFFER_SIZE)

  def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(10, activation='softmax')
    ])
    model.compile(
        loss=tf.keras.losses.sparse_categorical_crossentropy,
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
        metrics=['accuracy'])
    return model

  # single node
  # single_worker_model = build_and_compile_cnn_model()
  # single_worker_model.fit(x=train_datasets, epochs=3)

  # Here the batch size scales up by number of workers since
  # `tf.data.Dataset.batch` expects the global batch size. Previously we used 64,
  # and now this becomes 128.
  GLOBAL_BATCH_SIZE = BATCH_SIZE * NUM_WORKERS
  train_datasets = train_datasets_unbatched.batch(GLOBAL_BATCH_SIZE)

  # this fails
  # callbacks = [tf.keras.callbacks.ModelCheckpoint(filepath=args.model_dir)]
  tf.io.gfile.makedirs(args.model_dir)
  filepath = args.model_dir + "/weights-{epoch:04d}"
  callbacks = [
    tf.keras.callbacks.ModelCheckpoint(filepath=filepath, verbose=1, save_weights_only=True),
    tf.keras.callbacks.TensorBoard(log_dir=args.model_dir)
  ]

  with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()
  multi_worker_model.fit(x=train_datasets, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks)

  ctx.export(multi_worker_model)


SPEC = {"id": {"kind": "key"}, "pixels": {"kind": "vector", "dim": 64},
        "digit": {"kind": "label", "task": "multiclass", "classes": [str(d) for d in range(10)]}}


def prepare_digits(spark, output):
  """scikit-learn's 1,797 bundled 8x8 digits as a table, prepared as TFRecords at `output`."""
  from sklearn.datasets import load_digits

  from tfos_jobs import api

  digits = load_digits()
  rows = [(i, [float(p) for p in x], str(y)) for i, (x, y) in enumerate(zip(digits.data, digits.target))]
  table = spark.createDataFrame(rows, "id long, pixels array<double>, digit string")
  return api.prepare(spark, spec=SPEC, tables={"digits": table}, output=output, overwrite=True)


if __name__ == '__main__':
  import argparse

  from tfos_jobs import api
  from tfos_jobs.config import ModelConfig, TrainConfig

  parser = argparse.ArgumentParser()
  parser.add_argument("--batch_size", help="number of records per batch", type=int, default=64)
  parser.add_argument("--buffer_size", help="size of shuffle buffer", type=int, default=10000)
  parser.add_argument("--cluster_size", help="number of nodes in the cluster", type=int, default=2)
  parser.add_argument("--epochs", help="number of epochs", type=int, default=3)
  parser.add_argument("--model_dir", help="path to save model/checkpoint", default="mnist_model")
  parser.add_argument("--export_dir", help="path to save the trained model (any filesystem)", default="mnist_export")
  parser.add_argument("--steps_per_epoch", help="number of steps per epoch", type=int, default=469)
  parser.add_argument("--work", help="where the prepared digits go (any filesystem)", default="mnist_work")
  parser.add_argument("--master", help="Spark master", default="local-cluster[2,1,1536]")

  args = parser.parse_args()
  print("args:", args)

  spark = api.session(master=args.master)
  dataset = prepare_digits(spark, args.work + "/digits")
  settings = TrainConfig(workers=args.cluster_size, epochs=args.epochs, batch_size=args.batch_size, tensorboard=False,
                         model=ModelConfig(params=vars(args)))
  result = api.train(spark, dataset=dataset, model_dir=args.export_dir, fn=main_fun, config=settings, overwrite=True)
  print("trained:", result.epochs, "epochs on", len(result.nodes), "nodes; model:", result.saved_model)
  spark.stop()
