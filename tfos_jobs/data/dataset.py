"""A prepared dataset on disk (`contracts.dataset`): reading it, and writing it whole.

Prepare writes into a staging directory beside the output: Spark's commit protocol writes the records into
`_records/split=<s>/`, `settle` gives each split its directory and stable file names, `write_meta` writes `_meta/` (the
manifest last) and `publish` moves the whole into place. Training, export and `tfos evaluate` read it back with `read`.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

from tfos_jobs import __version__
from tfos_jobs.contracts.dataset import (ALL_SPLITS, MANIFEST, META, RECORDS, SEQUENCE_EXAMPLE, SPEC, SPLITS, STATS,
                                         SUCCESS, VOCAB, Manifest, Split)
from tfos_jobs.data.columns import SPLIT
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.storage import Storage, StorageError, readable, swap_into

T = TypeVar("T")


@dataclass(frozen=True)
class DatasetMeta:
    root: str
    spec: FeatureSpec
    stats: dict[str, Any]
    manifest: Manifest
    vocab: dict[str, list[str]]

    def split_dir(self, split: str) -> str:
        return f"{self.root}/{split}"

    def files(self, split: str) -> list[str]:
        return [f"{self.root}/{split}/{name}" for name, _ in self.manifest.splits[split].files]

    def records(self, split: str) -> int:
        return self.manifest.splits[split].records

    @property
    def has_test(self) -> bool:
        """Whether a held-out test split was written (`prepare.split` names one)."""
        return Split.TEST.value in self.manifest.splits

    def meta_files(self) -> list[str]:
        """The paths of every file of `_meta/`."""
        names = [MANIFEST, SPEC, STATS, *(f"{VOCAB}/{f.name}.txt" for f in self.spec.with_vocabulary)]
        return [f"{self.root}/{META}/{n}" for n in names]

    @property
    def compression(self) -> str:
        return self.manifest.compression


def read(root: str, storage: Storage | None = None) -> DatasetMeta:
    """Load a prepared dataset's metadata; refuse a directory whose preparation did not finish.

    On the driver, `storage` reads it from wherever it lives; a TF node reads its local copy."""
    root = root.rstrip("/")

    def text(path: str) -> str:
        if storage is not None:
            return storage.read_text(path)
        with open(Storage.local(path) or path, encoding="utf-8") as fh:
            return fh.read()

    try:
        if storage is not None:  # during a publish, or after one killed half-way, the previous dataset is aside
            root = readable(storage, root)
        manifest = Manifest.from_dict(json.loads(text(f"{root}/{META}/{MANIFEST}")))
    except (FileNotFoundError, StorageError) as e:
        if isinstance(e, StorageError) and not e.missing:
            raise InputError(f"{root!r}: {str(e).split(': ', 1)[-1]}") from None
        raise InputError(
            f"{root!r} is not a prepared dataset: {META}/{MANIFEST} is missing "
            "(run `tfos prepare`, or the preparation did not finish)"
        ) from None
    spec = FeatureSpec.from_json(text(f"{root}/{META}/{SPEC}"))
    if spec.fingerprint() != manifest.spec_fingerprint:
        raise InputError(f"{root}/{META}/{SPEC} does not match the manifest's spec fingerprint")
    stats = json.loads(text(f"{root}/{META}/{STATS}"))
    vocab = {f.name: text(f"{root}/{META}/{VOCAB}/{f.name}.txt").splitlines() for f in spec.with_vocabulary}
    return DatasetMeta(root, spec, stats, manifest, vocab)


def header(spec: FeatureSpec, out: str, spark_info: Mapping[str, str], started: float, record_type: str,
           tfrecord_format: str, compression: str) -> dict[str, Any]:
    """What every manifest starts with: versions, time, where, the spec, the records."""
    return {
        "format_version": 1,
        "tfos_version": __version__,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.time() - started, 1),
        "output": out,
        "spark": dict(spark_info),
        "spec_fingerprint": spec.fingerprint(),
        "records": {"format": tfrecord_format, "record_type": record_type, "compression": compression,
                    "columns": spec.record_schema()},
    }


def settle(fs: Storage, staging: str) -> dict[str, list[tuple[str, int]]]:
    """`_records/split=<s>/part-*` -> `<s>/part-NNNNN.*` (an empty train or eval split gets an
    empty directory, an empty test split none); returns each split's (file, bytes)."""
    split_files = {}
    for split in ALL_SPLITS:
        src, dst = f"{staging}/{RECORDS}/{SPLIT}={split}", f"{staging}/{split}"
        if fs.exists(src):
            fs.rename(src, dst)
        elif split in SPLITS:
            fs.makedirs(dst)
        else:
            continue
        for name, _ in fs.files(dst):
            fs.rename(f"{dst}/{name}", f"{dst}/{stable_name(name)}")
        split_files[split] = fs.files(dst)
    fs.delete(f"{staging}/{RECORDS}")
    return split_files


def stable_name(name: str) -> str:
    """`part-00003-<job uuid>.c000.tfrecord` -> `part-00003.tfrecord`: the same input gives the
    same file names (and, rows being spread by key and sorted, the same bytes) on every run."""
    match = re.fullmatch(r"(part-\d+)-[^.]*(?:\.c\d+)?(\..+)", name)
    return f"{match.group(1)}{match.group(2)}" if match else name


def write_meta(fs: Storage, root: str, spec: FeatureSpec, stats: Mapping[str, Any],
               vocab: Mapping[str, list[tuple[str, int]]], manifest: Manifest) -> None:
    meta = f"{root}/{META}"
    fs.write_text(f"{meta}/{SPEC}", spec.to_json())
    fs.write_text(f"{meta}/{STATS}", json.dumps(stats, indent=2, sort_keys=True) + "\n")
    for name, entries in vocab.items():
        fs.write_text(f"{meta}/{VOCAB}/{name}.txt", "".join(f"{value}\n" for value, _ in entries))
    fs.write_text(f"{meta}/{MANIFEST}", json.dumps(manifest.to_dict(), indent=2) + "\n")


def publish(fs: Storage, staging: str, out: str) -> None:
    """Mark the staging directory complete and move it into place, whole or not at all: the
    dataset `out` held before stays readable whatever stops the publish (`storage.swap_into`)."""
    fs.write_text(f"{staging}/{SUCCESS}", "")
    swap_into(fs, staging, out)


def summary(manifest: Manifest) -> str:
    """A few lines for the console: records per split, rejects, imputations, vocabulary sizes."""
    splits, rejected = manifest.splits, manifest.rejected
    if manifest.record_type == SEQUENCE_EXAMPLE:
        w, rows = _present(manifest.windows, "windows"), _present(manifest.rows, "rows")
        return "\n".join([
            f"dataset {manifest.output}",
            "  windows: " + ", ".join(f"{s} {v.records:,} from {_count(_present(v.assets, 'assets'), 'asset')} in "
                                      f"{_count(len(v.files), 'file')}" for s, v in splits.items()),
            f"  dropped windows: {w['dropped']:,}"
            + "".join(f"\n    {n:,} {reason}" for reason, n in w["dropped_by_reason"].items()),
            "  sources: " + ", ".join(f"{n} ({v['files']} files)" for n, v in manifest.sources.items()),
            f"  rows: {rows['read']:,} read, {rows['rejected']:,} rejected"
            + (f" (in {rejected['path']}/)" if rejected["path"] else ""),
        ])
    imputed = _present(manifest.imputed, "imputed")
    vocabulary_sizes = _present(manifest.vocabulary_sizes, "vocabulary_sizes")
    lines = [
        f"dataset {manifest.output}",
        "  records: " + ", ".join(f"{s} {v.records:,} in {len(v.files)} files" for s, v in splits.items()),
        "  sources: " + ", ".join(f"{n} {v['rows']:,} rows" for n, v in manifest.sources.items()),
        f"  rejected: {rejected['rows']:,} rows"
        + "".join(f"\n    {n:,} {reason}" for reason, n in rejected["by_reason"].items()),
        f"  imputed: {imputed['rows']:,} rows; by column: "
        + (", ".join(f"{c} {n:,}" for c, n in imputed["by_column"].items() if n) or "none"),
        "  vocabulary sizes: " + ", ".join(f"{c} {n}" for c, n in vocabulary_sizes.items()),
    ]
    return "\n".join(lines)


def _present(value: T | None, field: str) -> T:
    """A manifest field its kind of dataset (rows or sensor windows) always has."""
    if value is None:
        raise ValueError(f"the manifest lacks {field!r}, which its kind of dataset has")
    return value


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
