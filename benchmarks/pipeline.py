"""The tf.data input pipeline alone, in the driver process: records/s of the two paths the
reader training uses (a shard parsed once into memory, or streamed: batch, then one
vectorised parse per batch) against the textbook order (parse each record, then batch), on
the same files. The report puts them beside what training consumes."""
from __future__ import annotations

import time
from typing import Sequence

from tfos_jobs.data import reader
from tfos_jobs.features.spec import FeatureSpec


def in_memory(files: Sequence[str], spec: FeatureSpec, batch_size: int, compression: str = "none"):
    """What training reads when a worker's share fits in memory (train.in_memory_mb), shuffled as there."""
    return reader.make_dataset(files, spec, batch_size, repeat=True, shuffle=True, seed=1, compression=compression,
                               in_memory=True)


def batch_then_parse(files: Sequence[str], spec: FeatureSpec, batch_size: int, compression: str = "none"):
    """What training reads when a worker's share streams from its files, shuffling aside (as
    `parse_then_batch`, which it is compared with)."""
    return reader.make_dataset(files, spec, batch_size, repeat=True, compression=compression)


def parse_then_batch(files: Sequence[str], spec: FeatureSpec, batch_size: int, compression: str = "none"):
    """The same files, interleave and prefetch, but one `parse_single_example` per record."""
    import tensorflow as tf

    columns = spec.model_inputs + (spec.label.name,)
    parse_spec = spec.parse_spec(columns)
    label = spec.label.name

    def parse(serialized):
        parsed = tf.io.parse_single_example(serialized, parse_spec)
        return parsed, parsed.pop(label)

    ds = tf.data.Dataset.from_tensor_slices(sorted(files)).interleave(
        lambda f: tf.data.TFRecordDataset(f, reader.TF_COMPRESSION[compression], buffer_size=1 << 20),
        cycle_length=max(1, min(4, len(files))), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.repeat().map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size).prefetch(tf.data.AUTOTUNE)


def records_per_sec(dataset, batches: int, batch_size: int) -> float:
    """Pull `batches` batches through the pipeline, counting records inside the graph (a
    Python loop would add its own per-batch cost). Built fresh each time: no cache carries over."""
    import tensorflow as tf

    started = time.perf_counter()
    n = int(dataset.take(batches).reduce(tf.constant(0, tf.int64),
                                         lambda count, batch: count + tf.shape(batch[1], out_type=tf.int64)[0]))
    seconds = time.perf_counter() - started
    if n < batches * batch_size:
        raise RuntimeError(f"the input pipeline gave {n} records, expected {batches * batch_size}")
    return n / seconds
