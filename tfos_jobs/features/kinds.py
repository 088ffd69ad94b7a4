"""The kinds of feature a spec is made of, and what each accepts on input and stores."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Union

from tfos_jobs.names import Name
from tfos_jobs.tasks import LabelTask, Task

RecordDtype = Literal["int64", "float32", "string"]  # a list's and a vector's: of their elements
# The Spark SQL type a column of each record dtype is written from and read back as.
SPARK_TYPES: dict[str, str] = {"int64": "long", "float32": "float", "string": "string"}


@dataclass(frozen=True)
class KeyFeature:
    """An example identifier: written to the records, used for the split; an input of an autoencoder
    alone (a window's asset), never of a model of rows."""

    name: str
    dtype: Literal["int64", "string"] = "int64"
    kind: Literal["key"] = "key"


class NumericEncoding(Name):
    LINEAR = "linear"
    PIECEWISE_LINEAR = "piecewise_linear"
    PERIODIC = "periodic"


NUMERIC_ENCODINGS = tuple(e.value for e in NumericEncoding)
if TYPE_CHECKING:  # a type checker reads the setting as str; the spec's loader checks its value
    NumericEncodingName = str
else:
    NumericEncodingName = Literal[NUMERIC_ENCODINGS]
# The settings each encoding reads (the others are not written to the spec's JSON).
ENCODING_SETTINGS: dict[str, tuple[str, ...]] = {
    NumericEncoding.LINEAR: (), NumericEncoding.PIECEWISE_LINEAR: ("bins", "embedding_dim"),
    NumericEncoding.PERIODIC: ("frequencies", "sigma", "embedding_dim")}


@dataclass(frozen=True)
class NumericFeature:
    """A number. `default` replaces nulls: a value, or "mean" (of the train split, fixed at prepare).

    `encoding`, how the deep part sees it (Gorishniy et al., "On Embeddings for Numerical Features in Tabular Deep
    Learning", 2022): "linear", the (normalised) value itself; "piecewise_linear", one value per bin between `bins`
    quantiles of the train split (computed at prepare, kept in stats.json), 1 for bins below the value, 0 above, the
    fraction within; "periodic", sin and cos of `frequencies` trained multiples of the normalised value, started at
    N(0, `sigma`). Either of the last two then goes through a ReLU layer of `embedding_dim` units of its own."""

    name: str
    normalize: bool = True
    default: Union[float, Literal["mean"]] = "mean"
    encoding: NumericEncodingName = NumericEncoding.LINEAR.value
    bins: int = 32
    frequencies: int = 64
    sigma: float = 10.0
    embedding_dim: int = 16
    kind: Literal["numeric"] = "numeric"

    def encoding_key(self) -> tuple:
        """The encoding and the settings it reads: features with equal keys can share a layer."""
        return (self.encoding, *(getattr(self, s) for s in ENCODING_SETTINGS.get(self.encoding, ())))


@dataclass(frozen=True)
class CategoricalFeature:
    """A string category looked up in a vocabulary computed at prepare time, or, with
    `hash_buckets`, hashed into that many ids by the model's graph: for id spaces no vocabulary
    should hold (users, items, devices), where prepare then makes no vocabulary pass. Distinct
    values may share a bucket; the graph hashes them the same way at training and at serving."""

    name: str
    top_k: Union[int, None] = None
    min_count: int = 1
    num_oov_buckets: int = 1
    embedding_dim: int = 8
    default: str = "__missing__"
    max_length: Union[int, None] = None  # longer values are cut to this many characters (and counted)
    hash_buckets: Union[int, None] = None
    kind: Literal["categorical"] = "categorical"

    @property
    def hashed(self) -> bool:
        return self.hash_buckets is not None


@dataclass(frozen=True)
class CrossedFeature:
    """A hashed cross of categorical (or bucketized) features, for the wide (linear) part of a model. One of them may be
    a text or a list: each of its tokens (elements) is crossed with the others' values, and the wide part sums their
    weights (a word that means one thing in one category and another elsewhere). Two are refused: every token of one
    with every token of the other makes width x width ids a row, mostly noise (`ngrams` pairs neighbouring words)."""

    name: str
    columns: tuple[str, ...]
    hash_buckets: int = 1000
    kind: Literal["crossed"] = "crossed"


@dataclass(frozen=True)
class BucketizedFeature:
    """A numeric feature cut at fixed boundaries, one-hot in the wide part."""

    name: str
    source: str
    boundaries: tuple[float, ...]
    kind: Literal["bucketized"] = "bucketized"


@dataclass(frozen=True)
class Label:
    """The target. Binary labels in a string column name their positive and negative values."""

    name: str
    task: LabelTask = Task.BINARY.value
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    kind: Literal["label"] = "label"


@dataclass(frozen=True)
class TimeFeature:
    """The time column of sensor series, and how they are cut into windows.

    Rows of one asset (the key feature) are placed on a grid of `step_seconds`. A window is `window` consecutive steps;
    one starts every `stride` steps from the asset's first row. Up to `max_gap` missing steps (absent rows) in a row are
    filled forward, a longer gap drops every window it touches; a sensor's nulls are filled forward up to `fill_limit`
    steps in a row, else the window is dropped. Dropped windows are counted by reason."""

    name: str
    step_seconds: int = 60
    window: int = 64
    stride: int = 64
    max_gap: int = 0
    fill_limit: int = 0
    kind: Literal["time"] = "time"


@dataclass(frozen=True)
class SequenceFeature:
    """A float sensor stepped over time: one value per step, a window of them per record.
    `normalize`: standardised (in the model's graph) by the train split's mean and std."""

    name: str
    normalize: bool = True
    kind: Literal["sequence"] = "sequence"


class Combiner(Name):
    MEAN = "mean"
    SUM = "sum"


COMBINERS = tuple(c.value for c in Combiner)


@dataclass(frozen=True)
class TextFeature:
    """Free text (a review, a title, a query): the model takes the raw string and tokenizes it in
    its own graph (`features.text`: lowercased, split on anything not a letter, digit or mark), the
    first `max_tokens` words kept (longer texts are cut and counted), with `ngrams` = 2 the pairs of
    neighbouring words too. Tokens are looked up in a word vocabulary computed at prepare (`top_k`
    most frequent seen at least `min_count` times; others share `num_oov_buckets` ids) and enter the
    deep part as the `combiner` of their embeddings (a bag of words). A null is the empty text."""

    name: str
    top_k: Union[int, None] = 20_000
    min_count: int = 2
    num_oov_buckets: int = 1
    embedding_dim: int = 16
    max_tokens: int = 64
    ngrams: int = 1
    combiner: str = Combiner.MEAN.value
    kind: Literal["text"] = "text"

    def width(self) -> int:
        """Token ids per row the model sees: the words kept, and their pairs with `ngrams` = 2."""
        return self.max_tokens * self.ngrams - (self.ngrams - 1)


@dataclass(frozen=True)
class ListFeature:
    """A list of values (clicked items, tags, genres): array<string> or an array of integers. Its
    elements are looked up in a vocabulary of elements computed at prepare (as a categorical's) and
    enter the deep part as the `combiner` of their embeddings. Lists longer than `max_length` are
    cut and counted; a null list is empty, a null or empty element is left out (both counted)."""

    name: str
    top_k: Union[int, None] = None
    min_count: int = 1
    num_oov_buckets: int = 1
    embedding_dim: int = 8
    max_length: int = 32
    combiner: str = Combiner.MEAN.value
    kind: Literal["list"] = "list"

    def width(self) -> int:
        return self.max_length


@dataclass(frozen=True)
class VectorFeature:
    """A vector of `dim` numbers (a precomputed embedding): array<float|double>, or a Spark ML
    Vector. It enters the deep part as it is. A row whose vector has another length is set aside
    with the rejects (counted by reason), never padded; a null vector is zeros (counted)."""

    name: str
    dim: int
    kind: Literal["vector"] = "vector"


Bag = Union[TextFeature, ListFeature]  # a row's several ids, embedded and combined into one vector
Feature = Union[KeyFeature, NumericFeature, CategoricalFeature, CrossedFeature, BucketizedFeature, Label,
                TimeFeature, SequenceFeature, TextFeature, ListFeature, VectorFeature]
FEATURE_KINDS: dict[str, type] = {
    "key": KeyFeature,
    "numeric": NumericFeature,
    "categorical": CategoricalFeature,
    "crossed": CrossedFeature,
    "bucketized": BucketizedFeature,
    "label": Label,
    "time": TimeFeature,
    "sequence": SequenceFeature,
    "text": TextFeature,
    "list": ListFeature,
    "vector": VectorFeature,
}
# What a window record holds besides its sensors: the asset (the key feature) and the
# window's first and last step, as seconds since the epoch (SequenceExample context).
WINDOW_START = "window_start"
WINDOW_END = "window_end"
_TIMESTAMP = ("timestamp", "timestamp_ntz")

# Spark SQL type names each stored kind accepts on input (DataType.typeName()).
_INTEGRAL = ("byte", "short", "integer", "long")
_NUMERIC = _INTEGRAL + ("float", "double", "decimal")
_STRING = ("string",)


def accepted_input_types(f: Feature) -> tuple[str, ...]:
    """The Spark type names (DataType.typeName()) a stored feature's input column may have."""
    if isinstance(f, KeyFeature):
        return _INTEGRAL if f.dtype == "int64" else _STRING
    if isinstance(f, NumericFeature):
        return _NUMERIC
    if isinstance(f, CategoricalFeature):
        return _STRING + _INTEGRAL
    if isinstance(f, TimeFeature):
        return _TIMESTAMP
    if isinstance(f, SequenceFeature):
        return _NUMERIC
    if isinstance(f, TextFeature):
        return _STRING
    if isinstance(f, ListFeature):
        return tuple(f"array<{t}>" for t in _STRING + _INTEGRAL)
    if isinstance(f, VectorFeature):
        return (*(f"array<{t}>" for t in _NUMERIC), "vector")
    if isinstance(f, Label):
        if f.task == Task.REGRESSION:
            return _NUMERIC
        if f.task == Task.BINARY and not f.positive:
            return _INTEGRAL + ("boolean",)
        return _STRING + _INTEGRAL
    raise TypeError(f"{f.kind} features are not stored")
