"""The `_meta/` directory of a prepared dataset: what training and serving must agree on.

    _meta/feature_spec.json   the spec, with "mean" defaults resolved to numbers
    _meta/vocab/<name>.txt    one value per line, in vocabulary order
    _meta/stats.json          per numeric feature: count, mean, std, min, max (train split)
    _meta/manifest.json       files and records per split, spec fingerprint, source counts,
                              rows imputed and rejected. Written last: its presence means done.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.storage import Storage, StorageError

META = "_meta"
MANIFEST = "manifest.json"
SPEC = "feature_spec.json"
STATS = "stats.json"
VOCAB = "vocab"


@dataclass(frozen=True)
class DatasetMeta:
    root: str
    spec: FeatureSpec
    stats: dict[str, Any]
    manifest: dict[str, Any]
    vocab: dict[str, list[str]]

    def split_dir(self, split: str) -> str:
        return f"{self.root}/{split}"

    def files(self, split: str) -> list[str]:
        return [f"{self.root}/{split}/{f['path']}" for f in self.manifest["splits"][split]["files"]]

    def meta_files(self) -> list[str]:
        """The paths of every file of `_meta/`."""
        names = [MANIFEST, SPEC, STATS, *(f"{VOCAB}/{f.name}.txt" for f in self.spec.categorical)]
        return [f"{self.root}/{META}/{n}" for n in names]

    @property
    def compression(self) -> str:
        return self.manifest["records"]["compression"]


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
        manifest = json.loads(text(f"{root}/{META}/{MANIFEST}"))
    except (FileNotFoundError, StorageError) as e:
        if isinstance(e, StorageError) and not e.missing:
            raise InputError(f"{root!r}: {str(e).split(': ', 1)[-1]}") from None
        raise InputError(
            f"{root!r} is not a prepared dataset: {META}/{MANIFEST} is missing "
            "(run `tfos prepare`, or the preparation did not finish)"
        ) from None
    spec = FeatureSpec.from_json(text(f"{root}/{META}/{SPEC}"))
    if spec.fingerprint() != manifest["spec_fingerprint"]:
        raise InputError(f"{root}/{META}/{SPEC} does not match the manifest's spec fingerprint")
    stats = json.loads(text(f"{root}/{META}/{STATS}"))
    vocab = {f.name: text(f"{root}/{META}/{VOCAB}/{f.name}.txt").splitlines() for f in spec.categorical}
    return DatasetMeta(root, spec, stats, manifest, vocab)


def summary(manifest: dict[str, Any]) -> str:
    """A few lines for the console: records per split, rejects, imputations, vocabulary sizes."""
    splits = manifest["splits"]
    if manifest["records"]["record_type"] == "SequenceExample":
        w = manifest["windows"]
        return "\n".join([
            f"dataset {manifest['output']}",
            "  windows: " + ", ".join(f"{s} {v['records']:,} from {_count(v['assets'], 'asset')} in "
                                      f"{_count(len(v['files']), 'file')}" for s, v in splits.items()),
            f"  dropped windows: {w['dropped']:,}"
            + "".join(f"\n    {n:,} {reason}" for reason, n in w["dropped_by_reason"].items()),
            "  sources: " + ", ".join(f"{n} ({v['files']} files)" for n, v in manifest["sources"].items()),
            f"  rows: {manifest['rows']['read']:,} read, {manifest['rows']['rejected']:,} rejected"
            + (f" (in {manifest['rejected']['path']}/)" if manifest["rejected"]["path"] else ""),
        ])
    lines = [
        f"dataset {manifest['output']}",
        "  records: " + ", ".join(f"{s} {v['records']:,} in {len(v['files'])} files" for s, v in splits.items()),
        "  sources: " + ", ".join(f"{n} {v['rows']:,} rows" for n, v in manifest["sources"].items()),
        f"  rejected: {manifest['rejected']['rows']:,} rows"
        + "".join(f"\n    {n:,} {reason}" for reason, n in manifest["rejected"]["by_reason"].items()),
        f"  imputed: {manifest['imputed']['rows']:,} rows; by column: "
        + (", ".join(f"{c} {n:,}" for c, n in manifest["imputed"]["by_column"].items() if n) or "none"),
        "  vocabulary sizes: " + ", ".join(f"{c} {n}" for c, n in manifest["vocabulary_sizes"].items()),
    ]
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
