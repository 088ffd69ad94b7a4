"""The tf.data input pipeline, built from the feature spec.

Files are sharded per worker. A shard that fits in memory (`in_memory`) is read and parsed once, and each epoch is a
fresh full permutation of its rows, gathered batch by batch: a batch then costs a few gathers instead of a pass of every
record through interleave, shuffle buffer and parser, which on a one-core worker took more CPU than the model's step.
Larger shards stream: interleaved reads, a shuffle buffer, then batches parsed with `tf.io.parse_example` (one
vectorised parse per batch is far faster than one per record). Runs wherever TensorFlow runs: executors in training, the
driver in tests."""
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
    in_memory: bool = False,
    skip_batches: int = 0,
):
    """(features, label) batches; features is {name: tensor of shape [batch] + `spec.input_shape(name)`}.

    Both paths read the same rows for the same shard; `in_memory` shuffles fully (each epoch a permutation seeded by
    `seed` and the epoch) where streaming shuffles in a buffer. `skip_batches` starts after that many batches (a resumed
    run's): in memory, exactly where an unbroken pass would be; streaming, after as many records, read but not parsed (a
    streamed order is not fixed: files are interleaved as they become ready)."""
    import tensorflow as tf

    files = sorted(files)
    if not files:
        raise ValueError("no TFRecord files to read")
    parse = batch_parser(spec, with_key)
    if in_memory:
        return _in_memory(files, parse, batch_size, num_shards=num_shards, spec=spec, shard_index=shard_index,
                          shuffle=shuffle, seed=seed, repeat=repeat, compression=compression, skip_batches=skip_batches)
    by_file = len(files) >= num_shards
    if by_file:
        ds = tf.data.Dataset.from_tensor_slices(files)
        if num_shards > 1:
            ds = ds.shard(num_shards, shard_index)
        if shuffle:
            ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        ds = ds.interleave(
            lambda f: tf.data.TFRecordDataset(f, compression_type=TF_COMPRESSION[compression], buffer_size=1 << 20),
            cycle_length=max(1, min(cycle_length, len(files))),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=not shuffle,
        )
    else:  # fewer files than workers: share records, read in one fixed order so that shards never overlap
        ds = _records(files, num_shards, shard_index, compression)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    if skip_batches:
        ds = ds.skip(skip_batches * batch_size)
    ds = ds.batch(batch_size)
    return ds.map(lambda serialized: split_label(spec, parse(serialized)),
                  num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def batch_parser(spec: FeatureSpec, with_key: bool = False):
    """A function from a batch of serialized records to {column: tensor}: the model's inputs,
    the label (row records) and, with `with_key`, the key (always for windows: an autoencoder reads
    it, as a string). A list is [batch, max_length] (`FeatureSpec.dense_lists`).

    Window records (`tf.SequenceExample`) give each sensor as [batch, window]; they have no
    label: an autoencoder's target is its input."""
    import tensorflow as tf

    if spec.is_sequence:
        context, lists = spec.sequence_parse_spec()
        key = spec.key
        assert key is not None  # a sequence spec's records hold it (sequence_parse_spec needed it too)
        sensors = {f.name: lists[f.name] for f in spec.sequences}

        def parse_windows(serialized):
            ctx, seq, _ = tf.io.parse_sequence_example(serialized, context_features={key.name: context[key.name]},
                                                       sequence_features=sensors)
            return {**seq, key.name: asset_strings(ctx[key.name])}

        return parse_windows
    columns = spec.model_inputs + ((spec.key.name,) if with_key and spec.key else ()) + (spec.label.name,)
    parse_spec = spec.parse_spec(columns)
    return lambda serialized: spec.dense_lists(tf.io.parse_example(serialized, parse_spec))


def asset_strings(keys):
    """A window's key as the autoencoder reads it: a string (an integer key as its digits, as the
    prediction function spells it too)."""
    import tensorflow as tf

    return keys if keys.dtype == tf.string else tf.strings.as_string(keys)


def split_label(spec: FeatureSpec, parsed: dict):
    """(features, label); for windows the label is a placeholder of zeros (the loss ignores it)."""
    import tensorflow as tf

    if spec.is_sequence:
        first = parsed[spec.sequences[0].name]
        return parsed, tf.zeros_like(first[:, 0])
    return parsed, parsed.pop(spec.label.name)


def shard_files(files: Sequence[str], num_shards: int, shard_index: int) -> list[str]:
    """The files a worker opens: every num_shards-th from its index, or all of them when there
    are fewer files than workers (it then reads every num_shards-th record)."""
    files = sorted(files)
    return files[shard_index::num_shards] if len(files) >= num_shards else files


def shard_bytes(files: Sequence[tuple[str, int]], num_shards: int, shard_index: int) -> int:
    """TFRecord bytes a worker reads: its files, or its share of all when files are fewer than workers."""
    files = sorted(files)
    if len(files) >= num_shards:
        return sum(size for _, size in files[shard_index::num_shards])
    return -(-sum(size for _, size in files) // num_shards)


def _records(files: list[str], num_shards: int, shard_index: int, compression: str):
    """This worker's records, file after file: its files, or every num_shards-th record of all."""
    import tensorflow as tf

    by_file = len(files) >= num_shards
    records = tf.data.TFRecordDataset(files[shard_index::num_shards] if by_file else files,
                                      compression_type=TF_COMPRESSION[compression], buffer_size=1 << 20)
    return records if by_file or num_shards == 1 else records.shard(num_shards, shard_index)


def _in_memory(files: list[str], parse, batch_size: int, *, num_shards: int, spec: FeatureSpec,
               shard_index: int, shuffle: bool, seed: int | None, repeat: bool, compression: str, skip_batches: int):
    import tensorflow as tf

    records = _records(files, num_shards, shard_index, compression)
    # All rows in one batch, parsed at once. Graph-safe: a parameter-server worker builds this inside a function.
    table = parse(records.batch(2**31 - 1).get_single_element())  # {column: [rows, ...]}
    rows = tf.shape(next(iter(table.values())), out_type=tf.int64)[0]
    epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)
    if shuffle:
        base = tf.constant(seed or 0, tf.int64)
        order = epochs.map(lambda epoch: tf.random.experimental.stateless_shuffle(
            tf.range(rows, dtype=tf.int64), seed=tf.stack([base, epoch])))
    else:
        order = epochs.map(lambda epoch: tf.range(rows, dtype=tf.int64))

    def gather(index):
        return split_label(spec, {name: tf.gather(column, index) for name, column in table.items()})

    batches = order.rebatch(batch_size).skip(skip_batches)  # indices only: skipping gathers nothing
    return batches.map(gather, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


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
