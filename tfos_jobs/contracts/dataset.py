"""The layout of a prepared dataset, and its manifest: what prepare writes and what training,
serving and `tfos evaluate` read.

    <dataset>/
      train/part-NNNNN.tfrecord   eval/part-NNNNN.tfrecord     the records of each split
      test/part-NNNNN.tfrecord    a held-out split, when the split column names one: never
                                  trained on nor used to choose anything, scored once at the end
      _rejects/                   rows set aside (JSON), when there are any
      _meta/feature_spec.json     the spec, with "mean" defaults resolved to numbers
      _meta/vocab/<name>.txt      one value per line, in vocabulary order
      _meta/stats.json            per numeric feature or sensor: count, mean, std, min, max (train split),
                                  and `bins` (STATS_BINS), the bin edges of a piecewise-linear encoding
      _meta/manifest.json         `Manifest`. Written last: its presence means the dataset is whole.
      _SUCCESS

A dataset is written beside its place (`storage.staging_beside`) and moved into it whole.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, NotRequired, TypedDict, cast

from tfos_jobs.contracts.values import Json, JsonObject
from tfos_jobs.names import Name

META = "_meta"
MANIFEST = "manifest.json"
SPEC = "feature_spec.json"
STATS = "stats.json"
STATS_BINS = "bins"
VOCAB = "vocab"
REJECTS = "_rejects"
SUCCESS = "_SUCCESS"
RECORDS = "_records"  # while writing: Spark's output, one directory per split, before the files settle


class Split(Name):
    TRAIN = "train"
    EVAL = "eval"  # validation: early stopping, a sweep's metric, the eval figures
    TEST = "test"


SPLITS = (Split.TRAIN.value, Split.EVAL.value)  # the splits every dataset holds
ALL_SPLITS = (*SPLITS, Split.TEST.value)  # and the optional held-out one (in the manifest when not empty)
EXAMPLE, SEQUENCE_EXAMPLE = "Example", "SequenceExample"  # the record types: rows, sensor windows


class FileEntry(TypedDict):
    path: str  # relative to the split's directory
    bytes: int


class SplitEntry(TypedDict):
    """A split as the manifest's `splits` holds it."""

    records: int
    assets: NotRequired[int]  # sensor windows: the assets they come from
    files: list[FileEntry]


class RecordsEntry(TypedDict):
    """How the records are written (the manifest's `records`)."""

    format: str  # the Spark data source that wrote them
    record_type: str  # EXAMPLE or SEQUENCE_EXAMPLE
    compression: str
    columns: dict[str, JsonObject]  # per column: dtype, shape, default (FeatureSpec.record_schema)


class RejectedEntry(TypedDict):
    rows: int
    by_reason: dict[str, int]
    path: str | None  # REJECTS, when there are any


class WindowsEntry(TypedDict):
    """Sensor windows: how many were kept and dropped (by reason), and their shape in steps."""

    kept: int
    dropped: int
    dropped_by_reason: dict[str, int]
    window: int
    stride: int


class ImputedEntry(TypedDict):
    rows: int  # rows with at least one value filled
    by_column: dict[str, int]


@dataclass(frozen=True)
class SplitFiles:
    """One split: its records (rows or windows), its files (name and bytes), and for windows
    the assets they come from."""

    records: int
    files: tuple[tuple[str, int], ...]
    assets: int | None = None

    def to_dict(self) -> SplitEntry:
        out = SplitEntry(records=self.records, files=[FileEntry(path=name, bytes=size) for name, size in self.files])
        if self.assets is not None:
            out["assets"] = self.assets
        return out

    @classmethod
    def from_dict(cls, data: SplitEntry) -> "SplitFiles":
        return cls(int(data["records"]), tuple((f["path"], int(f["bytes"])) for f in data["files"]), data.get("assets"))


@dataclass(frozen=True)
class Manifest:
    """`_meta/manifest.json`. The fields after `rejected` belong to one kind of dataset: rows (imputed, truncated,
    dropped_elements, vocabulary_sizes) or sensor windows (rows, windows); the other kind's stay None and are not
    written, as does `dropped_elements` without list features."""

    format_version: int
    tfos_version: str
    created_at: str
    seconds: float
    output: str
    spark: Mapping[str, str]
    spec_fingerprint: str
    records: RecordsEntry
    splits: Mapping[str, SplitFiles]
    split: JsonObject  # the split settings and the boundary used (data.split.describe)
    sources: Mapping[str, JsonObject]  # per source: location, and rows or files
    rejected: RejectedEntry
    imputed: ImputedEntry | None = None
    truncated: Mapping[str, int] | None = None
    dropped_elements: Mapping[str, int] | None = None  # per list feature: null and empty elements left out
    vocabulary_sizes: Mapping[str, int] | None = None
    rows: Mapping[str, int] | None = None  # sensor windows: rows read and rejected
    windows: WindowsEntry | None = None
    extra: JsonObject = field(default_factory=dict)  # keys of a newer writer, kept as they are

    @property
    def record_type(self) -> str:
        return self.records["record_type"]

    @property
    def compression(self) -> str:
        return self.records["compression"]

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update(value)
            elif f.name == "splits":
                out["splits"] = {name: s.to_dict() for name, s in value.items()}
            elif value is not None:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: JsonObject) -> "Manifest":
        """`manifest.json` as read: its keys are this class's fields (checked by the dataset's reader)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known: dict[str, Json | Mapping[str, SplitFiles]] = {k: v for k, v in data.items() if k in names}
        splits = cast(Mapping[str, SplitEntry], data["splits"])
        known["splits"] = {name: SplitFiles.from_dict(s) for name, s in splits.items()}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})  # type: ignore[arg-type]
