"""Which dataset files each TF node gets, and the DataFrame that hands them over.

A cluster shares no disk and TensorFlow cannot open hdfs:// or s3a:// paths, so the node job reads its inputs through
Spark: partition i of the node job holds node i's files, read by its own task with Hadoop's FileSystem (the package's
`tfos-node-inputs` data source), from wherever the dataset lives, and put on the node's local disk
(`cluster.node.inputs`): copied by the executor and moved into place (`train.node_inputs = "spool"`), or sent to the
node's task in chunks (`"chunks"`). A file of any size reaches its node, and no process ever holds more than a few MiB
of it. Each node gets what it reads:

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

import json
from typing import Any, Iterable

from tfos_jobs.contracts.dataset import SPLITS, Split
from tfos_jobs.contracts.workspace import DATASET
from tfos_jobs.data import dataset, reader
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import InputError
from tfos_jobs.cluster.node.inputs import key
from tfos_jobs.storage import Storage, named
from tfos_jobs.topology import SPOOL, Role, Strategy, worker_rank


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


SOURCE = "tfos-node-inputs"  # the jar's NodeInputsSource
CHUNK = 4 << 20  # bytes per row: what an executor and a node hold of a file at a time


def frame(spark: Any, meta: DatasetMeta, plans: list[dict[str, str]], *, delivery: str = SPOOL) -> Any:
    """A DataFrame whose partition i holds the files of `plans[i]`, read by that partition's task
    on its own executor (`source`)."""
    return source(spark, [qualified(meta, wanted) for wanted in plans], delivery=delivery)


def source(spark: Any, paths: list[list[str]], *, delivery: str = SPOOL, chunk: int = CHUNK) -> Any:
    """The package's `tfos-node-inputs` data source over `paths[i]` for partition i: one row per
    file naming the executor's local copy (`spool`), or the files in chunks (`chunks`)."""
    return (spark.read.format(SOURCE).option("plan", json.dumps(paths)).option("chunk_bytes", str(chunk))
            .option("spool", str(delivery == SPOOL).lower()).load())
