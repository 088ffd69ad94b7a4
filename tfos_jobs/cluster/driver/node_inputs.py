"""Which dataset files each TF node gets, and the Spark RDD that hands them over.

A cluster shares no disk and TensorFlow cannot open hdfs:// or s3a:// paths, so the node job
reads its inputs through Spark: partition i of the node job holds node i's files, read by
its own task with Hadoop's FileSystem (`SparkContext.binaryFiles`), from wherever the dataset
lives, and written to the node's local disk (`cluster.node.inputs`). Each node gets what it reads:

  * multi-worker: `_meta/`, the eval split (every worker evaluates all of it) and its shard of
    the train split (`reader.shard_files`, the same rule the input pipeline applies);
  * parameter server: the chief `_meta/` and eval (it builds the input functions), each worker
    all of it (the chief's input function reads the whole train split on every worker);
  * the chief of an autoencoder also the whole train split (its anomaly threshold is a
    quantile over all train windows);
  * the chief of a row model also the test split, when there is one (it scores it once,
    after training; an autoencoder's test windows are scored by `tfos predict`/`evaluate`).
"""
from __future__ import annotations

import re
from typing import Iterable

from tfos_jobs.contracts.dataset import SPLITS, Split
from tfos_jobs.contracts.workspace import DATASET
from tfos_jobs.data import dataset, reader
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import ConfigError, InputError
from tfos_jobs.cluster.node.inputs import key
from tfos_jobs.storage import Storage, named
from tfos_jobs.topology import Role, Strategy, worker_rank


def read_dataset(storage: Storage, setting: str, path: str) -> DatasetMeta:
    """The prepared dataset at `path`, from wherever it lives; errors name `setting`."""
    with named(setting, path):
        root = storage.qualify(path)
    try:
        meta = dataset.read(root, storage)
    except InputError as e:
        raise InputError(f"{setting}: {e}") from None
    empty = [s for s in SPLITS if not meta.records(s)]
    if empty:
        records = ", ".join(f"{s} {meta.records(s):,}" for s in SPLITS)
        raise InputError(f"{setting}: {root}: the {' and '.join(empty)} split holds no records ({records}); training "
                         "needs both: prepare the dataset again (prepare.split says how keys are split)")
    return meta


def plan(meta: DatasetMeta, roles: list[tuple[str, int]], strategy: str, score_test: bool = True
         ) -> list[dict[str, str]]:
    """Per node (in `roles` order): key of each file it gets -> its place in the node's workspace."""
    train, evals = meta.files(Split.TRAIN), meta.files(Split.EVAL)
    workers = len(roles)
    out = []
    for role, index in roles:
        paths = list(meta.meta_files())
        if role != Role.PS:
            paths += evals
            if role == Role.CHIEF and score_test and meta.has_test and not meta.spec.is_sequence:
                paths += meta.files(Split.TEST)
            if strategy == Strategy.PARAMETER_SERVER:
                paths += train if role == Role.WORKER or meta.spec.is_sequence else []
            elif role == Role.CHIEF and meta.spec.is_sequence:
                paths += train
            else:
                paths += reader.shard_files(train, workers, worker_rank(role, index))
        out.append(everything(meta, paths))
    return out


def files_of(meta: DatasetMeta, splits: Iterable[str]) -> list[str]:
    """The dataset's `_meta/` files and those of `splits`."""
    return [*meta.meta_files(), *(path for split in splits for path in meta.files(split))]


def everything(meta: DatasetMeta, paths: list[str] | None = None) -> dict[str, str]:
    """`paths` (default: every file of the dataset) as key -> place under the workspace."""
    if paths is None:
        paths = files_of(meta, meta.manifest.splits)
    root = meta.root.rstrip("/")
    return {key(p): f"{DATASET}/{p[len(root) + 1:]}" for p in dict.fromkeys(paths)}


def qualified(meta: DatasetMeta, wanted: dict[str, str]) -> list[str]:
    """The storage paths of the planned files, as Spark is to read them."""
    root = meta.root.rstrip("/")
    return [f"{root}/{rel[len(DATASET) + 1:]}" for rel in wanted.values()]


# Spark hands a node each file whole, as one byte array in its executor's JVM heap: no array
# exceeds this, and one growing while it is read takes up to twice its size, beside Spark's own.
LARGEST_ARRAY = 2**31 - 16
HEAP_SHARE = 4  # a file may take up to a quarter of the heap
IN_DRIVER = re.compile(r"local(\[[^\]]*\])?")  # masters whose tasks run in the driver's JVM (not local-cluster)


def check_file_sizes(meta: DatasetMeta, heap: str, heap_bytes: int) -> None:
    """Refuse, before any TF node starts, a dataset whose files cannot reach the nodes whole: an
    executor would run out of memory half-way through its node's files. `heap` is the setting
    that sized `heap_bytes`, as the user wrote it."""
    limit = min(LARGEST_ARRAY, heap_bytes // HEAP_SHARE)
    for split, files in meta.manifest.splits.items():
        name, size = max(files.files, key=lambda f: f[1], default=("", 0))
        if size > limit:
            raise InputError(
                f"train.dataset: {meta.root}/{split}/{name} holds {size / 2**20:,.0f} MiB; a TF node gets each file whole "
                f"through its executor's heap ({heap}: files up to {limit / 2**20:,.0f} MiB): prepare the dataset into "
                f"more files (prepare.files_per_split; its {split} split has {len(files.files)}) or give executors more "
                "memory")


def heap_of(sc) -> tuple[str, int]:
    """The heap TF nodes' inputs pass through: the executors', or the driver's on a local master."""
    key = "spark.driver.memory" if IN_DRIVER.fullmatch(sc.master) else "spark.executor.memory"
    value = sc.getConf().get(key, "1g")
    return f"{key} = {value}", int(sc._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(value))


def rdd(sc, meta: DatasetMeta, plans: list[dict[str, str]]):
    """Partition i: (path, bytes) of each file of `plans[i]`, read by that partition's task (the
    files checked first: `check_file_sizes`)."""
    parts = []
    for wanted in plans:
        paths = qualified(meta, wanted)
        odd = next((p for p in paths if any(ch in p for ch in GLOB_CHARACTERS)), None)
        if odd is not None:  # Hadoop splits the list on commas and expands glob patterns
            raise ConfigError(f"train.dataset: {odd!r} holds one of {GLOB_CHARACTERS!r}, which Spark reads as "
                              "a list or a pattern; move the dataset to a path without them")
        parts.append(sc.binaryFiles(",".join(paths)).coalesce(1))
    return sc.union(parts)


GLOB_CHARACTERS = ",{}[]*?\\"
