"""The tf.data input pipeline, built from the feature spec.

Files are sharded per worker, read with interleave, batched and then parsed with
`tf.io.parse_example` (one vectorised parse per batch is far faster than one per record),
and prefetched. Runs wherever TensorFlow runs: executors in training, the driver in tests.
"""
from __future__ import annotations

from typing import Sequence

from tfos_jobs.features.spec import FeatureSpec

TF_COMPRESSION = {"none": None, "gzip": "GZIP"}


def make_dataset(
    files: Sequence[str],
    spec: FeatureSpec,
    batch_size: int,
    *,
    num_shards: int = 1,
    shard_index: int = 0,
    shuffle: bool = False,
    shuffle_buffer: int = 10_000,
    seed: int | None = None,
    repeat: bool = False,
    compression: str = "none",
    with_key: bool = False,
    cycle_length: int = 4,
):
    """(features, label) batches; features is {name: tensor of shape [batch]}."""
    import tensorflow as tf

    files = sorted(files)
    if not files:
        raise ValueError("no TFRecord files to read")
    by_file = len(files) >= num_shards
    ds = tf.data.Dataset.from_tensor_slices(files)
    if by_file and num_shards > 1:
        ds = ds.shard(num_shards, shard_index)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type=TF_COMPRESSION[compression], buffer_size=1 << 20),
        cycle_length=max(1, min(cycle_length, len(files))),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle,
    )
    if not by_file and num_shards > 1:
        ds = ds.shard(num_shards, shard_index)  # fewer files than workers: share records instead
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size)
    columns = spec.model_inputs + ((spec.key.name,) if with_key and spec.key else ()) + (spec.label.name,)
    parse_spec = spec.parse_spec(columns)
    label = spec.label.name

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, parse_spec)
        return parsed, parsed.pop(label)

    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


class CorruptRecordsError(ValueError):
    """A TFRecord file fails its checksums or ends inside a record."""


def find_corrupt(files: Sequence[str], compression: str = "none") -> tuple[str, str] | None:
    """The first file that cannot be read to the end, and TensorFlow's reason.

    TensorFlow reports corruption without the file name; training calls this to name it."""
    import tensorflow as tf

    for path in sorted(files):
        try:
            for _ in tf.data.TFRecordDataset(path, compression_type=TF_COMPRESSION[compression]):
                pass
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError) as e:
            return path, e.message.splitlines()[0]
    return None
