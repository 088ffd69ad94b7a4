"""The feature spec: the one description of every column, shared by preparation, training and serving.

Everything downstream is derived from it: the Spark input check, the TFRecord column types, the `tf.io` parse spec,
later the Keras inputs and the UDF signature. It is written once (in a `conf/*.toml` file), travels as
`_meta/feature_spec.json` with the dataset, and as an asset with the model, so no stage re-types a feature name."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from tfos_jobs.errors import ConfigError
from tfos_jobs.features.kinds import (COMBINERS, ENCODING_SETTINGS, FEATURE_KINDS, NUMERIC_ENCODINGS, SPARK_TYPES,
                                      WINDOW_END, WINDOW_START, Bag, BucketizedFeature, CategoricalFeature,
                                      CrossedFeature, Feature, KeyFeature, Label, ListFeature, NumericEncoding,
                                      NumericFeature, RecordDtype, SequenceFeature, TextFeature, TimeFeature,
                                      VectorFeature, accepted_input_types)
from tfos_jobs.tasks import Task

__all__ = ["FEATURE_KINDS", "SPARK_TYPES", "WINDOW_END", "WINDOW_START", "Bag", "BucketizedFeature",
           "CategoricalFeature", "CrossedFeature", "Feature", "FeatureSpec", "KeyFeature", "Label", "ListFeature",
           "NumericEncoding", "NumericFeature", "SequenceFeature", "TextFeature", "TimeFeature", "VectorFeature"]
# The kinds a model reads, and those stored in the records (the time column is read, then windows are cut).
_INPUTS = ("numeric", "categorical", "sequence", "text", "list", "vector")
_STORED = ("key", "numeric", "categorical", "label", "time", "sequence", "text", "list", "vector")
# What a cross may name: ids, one a row, and at most one bag (several a row, each crossed with the others).
_BAGS = ("text", "list")
_CROSSABLE = ("categorical", "bucketized", *_BAGS)
FORMAT_VERSION = 1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
@dataclass(frozen=True)
class FeatureSpec:
    features: tuple[Feature, ...]

    # -- views ---------------------------------------------------------------------------------

    def of_kind(self, kind: str) -> tuple[Any, ...]:
        return tuple(f for f in self.features if f.kind == kind)

    @property
    def is_sequence(self) -> bool:
        """Sensor windows (an autoencoder's input) rather than one row per example."""
        return bool(self.of_kind("sequence"))

    @property
    def time(self) -> TimeFeature:
        return self.of_kind("time")[0]

    @property
    def sequences(self) -> tuple[SequenceFeature, ...]:
        return self.of_kind("sequence")

    @property
    def key(self) -> KeyFeature | None:
        keys = self.of_kind("key")
        return keys[0] if keys else None

    @property
    def label(self) -> Label:
        return self.of_kind("label")[0]

    @property
    def numeric(self) -> tuple[NumericFeature, ...]:
        return self.of_kind("numeric")

    @property
    def categorical(self) -> tuple[CategoricalFeature, ...]:
        return self.of_kind("categorical")

    @property
    def with_vocabulary(self) -> tuple[CategoricalFeature | TextFeature | ListFeature, ...]:
        """The features prepare computes a vocabulary for: categoricals (but the hashed), texts' words, lists' elements."""
        return tuple(f for f in self.features if isinstance(f, (CategoricalFeature, TextFeature, ListFeature))
                     and not (isinstance(f, CategoricalFeature) and f.hashed))

    @property
    def bags(self) -> tuple[Bag, ...]:
        """Text and list features: several ids a row, embedded and combined into one vector."""
        return tuple(f for f in self.features if isinstance(f, (TextFeature, ListFeature)))

    @property
    def vectors(self) -> tuple[VectorFeature, ...]:
        return self.of_kind("vector")

    @property
    def model_inputs(self) -> tuple[str, ...]:
        """Raw columns a model reads, in spec order: the serving signature's arguments. An
        autoencoder reads its windows' key too (as a string): its statistics and threshold are per asset."""
        sequence = self.is_sequence
        return tuple(f.name for f in self.features if f.kind in _INPUTS or sequence and f.kind == "key")

    @property
    def stored_columns(self) -> tuple[str, ...]:
        """Columns read from the input table (and, but for the time, written to every record), in spec order."""
        return tuple(f.name for f in self.features if f.kind in _STORED)

    def get(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(f"no feature named {name!r}; features: {', '.join(f.name for f in self.features)}")

    # -- checks --------------------------------------------------------------------------------

    def errors(self) -> list[str]:
        """Every inconsistency, each prefixed with the config key it concerns."""
        errs: list[str] = []
        names = [f.name for f in self.features]
        for name in sorted({n for n in names if names.count(n) > 1}):
            errs.append(f"features.{name}: defined more than once")
        labels = self.of_kind("label")
        if self.is_sequence:
            errs += self._sequence_errors()
        elif len(labels) != 1:
            errs.append(f"features: exactly one feature needs kind = \"label\", found {len(labels)}")
        if len(self.of_kind("key")) > 1:
            errs.append("features: at most one feature may have kind = \"key\"")
        if not self.model_inputs:
            errs.append("features: no numeric or categorical feature to train on")
        kinds = {f.name: f.kind for f in self.features}
        for name in names:
            if not _NAME.fullmatch(name):
                errs.append(f"features.{name}: a feature name must be letters, digits and _, not starting with a digit")
        for f in self.features:
            where = f"features.{f.name}"
            if isinstance(f, CategoricalFeature):
                if f.top_k is not None and f.top_k < 1:
                    errs.append(f"{where}.top_k: must be >= 1 (or left out for no limit), got {f.top_k}")
                if f.min_count < 1:
                    errs.append(f"{where}.min_count: must be >= 1, got {f.min_count}")
                if f.num_oov_buckets < 1:
                    errs.append(f"{where}.num_oov_buckets: must be >= 1, got {f.num_oov_buckets}")
                if f.embedding_dim < 1:
                    errs.append(f"{where}.embedding_dim: must be >= 1, got {f.embedding_dim}")
                if f.max_length is not None and f.max_length < 1:
                    errs.append(f"{where}.max_length: must be >= 1 (or left out), got {f.max_length}")
                if f.hash_buckets is not None and f.hash_buckets < 1:
                    errs.append(f"{where}.hash_buckets: must be >= 1 (or left out for a vocabulary), got {f.hash_buckets}")
                if f.hashed and f.top_k is not None:
                    errs.append(f"{where}.top_k: a hashed feature (hash_buckets) has no vocabulary to cut")
            elif isinstance(f, NumericFeature):
                if f.encoding not in NUMERIC_ENCODINGS:
                    errs.append(f"{where}.encoding: {f.encoding!r} is not one of {', '.join(map(repr, NUMERIC_ENCODINGS))}")
                for attr, least in (("bins", 2), ("frequencies", 1), ("embedding_dim", 1)):
                    if getattr(f, attr) < least:
                        errs.append(f"{where}.{attr}: must be >= {least}, got {getattr(f, attr)}")
                if not f.sigma > 0:
                    errs.append(f"{where}.sigma: must be > 0, got {f.sigma}")
            elif isinstance(f, CrossedFeature):
                if len(f.columns) < 2:
                    errs.append(f"{where}.columns: a cross needs at least two features, got {list(f.columns)}")
                for c in f.columns:
                    if kinds.get(c) not in _CROSSABLE:
                        errs.append(f"{where}.columns: {c!r} is not a categorical, bucketized, text or list feature")
                bags = [c for c in f.columns if kinds.get(c) in _BAGS]
                if len(bags) > 1:  # a row's every token of one with every token of the other: width x width ids
                    errs.append(f"{where}.columns: crosses {' and '.join(map(repr, bags))}; a cross takes one text or "
                                "list (each token crossed with the other values), not two (for pairs of words: ngrams)")
                if f.hash_buckets < 1:
                    errs.append(f"{where}.hash_buckets: must be >= 1, got {f.hash_buckets}")
            elif isinstance(f, (TextFeature, ListFeature)):
                errs += _bag_errors(f, where)
            elif isinstance(f, VectorFeature):
                if f.dim < 1:
                    errs.append(f"{where}.dim: must be >= 1, got {f.dim}")
            elif isinstance(f, BucketizedFeature):
                if kinds.get(f.source) != "numeric":
                    errs.append(f"{where}.source: {f.source!r} is not a numeric feature")
                if not f.boundaries or list(f.boundaries) != sorted(set(f.boundaries)):
                    errs.append(f"{where}.boundaries: need strictly increasing values, got {list(f.boundaries)}")
            elif isinstance(f, Label):
                if f.task == Task.BINARY and bool(f.positive) != bool(f.negative):
                    errs.append(f"{where}: a binary label with string values needs both positive and negative")
                if set(f.positive) & set(f.negative):
                    errs.append(f"{where}: values {sorted(set(f.positive) & set(f.negative))} are both positive and negative")
                if f.task != Task.BINARY and (f.positive or f.negative):
                    errs.append(f"{where}: positive/negative apply to task = \"binary\" only")
                if f.task != Task.MULTICLASS and f.classes:
                    errs.append(f"{where}.classes: applies to task = \"multiclass\" only")
        return errs

    def _sequence_errors(self) -> list[str]:
        errs = []
        others = [f.name for f in self.features if f.kind not in ("key", "time", "sequence")]
        if others:
            errs.append(f"features: sequence features take no {', '.join(sorted({self.get(n).kind for n in others}))} "
                        f"features alongside them ({', '.join(others)}); an autoencoder has no label")
        if self.key is None or len(self.of_kind("time")) != 1:
            errs.append("features: sequence features need one feature with kind = \"key\" (the asset) and one "
                        "with kind = \"time\" (the time column and the window settings)")
        for f in self.of_kind("time"):
            where = f"features.{f.name}"
            for attr in ("step_seconds", "window", "stride"):
                if getattr(f, attr) < 1:
                    errs.append(f"{where}.{attr}: must be >= 1, got {getattr(f, attr)}")
            for attr in ("max_gap", "fill_limit"):
                if getattr(f, attr) < 0:
                    errs.append(f"{where}.{attr}: must be >= 0, got {getattr(f, attr)}")
        for name in (WINDOW_START, WINDOW_END):
            if any(f.name == name for f in self.features):
                errs.append(f"features.{name}: the name is taken by the window records' {name} column")
        return errs

    def check(self) -> "FeatureSpec":
        errs = self.errors()
        if errs:
            raise ConfigError("invalid feature spec:\n  " + "\n  ".join(errs))
        return self

    def input_type_errors(self, column_types: Mapping[str, str],
                          names: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
        """Check a table's columns ({name: Spark typeName}) against what each stored feature
        (or each of `names`) needs; returns (column, problem) pairs."""
        errs = []
        for name in names or self.stored_columns:
            f = self.get(name)
            allowed = accepted_input_types(f)
            if name not in column_types:
                errs.append((name, f"column {name!r} ({f.kind} feature) is missing"))
            elif column_types[name] not in allowed:
                errs.append((name, f"column {name!r} ({f.kind} feature) has type {column_types[name]}, "
                                   f"expected one of: {', '.join(allowed)}"))
        return errs

    # -- what the records hold -----------------------------------------------------------------

    def record_dtypes(self) -> dict[str, RecordDtype]:
        """The dtype of every column in the TFRecords, in spec order."""
        out: dict[str, RecordDtype] = {}
        if self.is_sequence:
            key = self.key
            assert key is not None  # a sequence spec has one (errors())
            out[key.name] = key.dtype
            out[WINDOW_START] = out[WINDOW_END] = "int64"
            out.update({f.name: "float32" for f in self.sequences})
            return out
        for name in self.stored_columns:
            f = self.get(name)
            if isinstance(f, KeyFeature):
                out[name] = f.dtype
            elif isinstance(f, NumericFeature):
                out[name] = "float32"
            elif isinstance(f, (CategoricalFeature, TextFeature, ListFeature)):
                out[name] = "string"  # a list's elements, as text whatever their input type
            elif isinstance(f, VectorFeature):
                out[name] = "float32"
            else:
                assert isinstance(f, Label)  # the one stored kind left in a row spec
                out[name] = "float32" if f.task == Task.REGRESSION else "int64"
        return out

    def record_schema(self) -> dict[str, dict[str, Any]]:
        """Per record column: dtype, shape and default. Enough for plain TensorFlow to parse the records."""
        schema: dict[str, dict[str, Any]] = {}
        if self.is_sequence:  # SequenceExample: context features, and one feature list per sensor
            for name, dtype in self.record_dtypes().items():
                sensor = name not in (WINDOW_START, WINDOW_END) and self.get(name).kind == "sequence"
                schema[name] = {"dtype": dtype, "shape": [self.time.window] if sensor else [],
                                "default": None, "part": "feature_list" if sensor else "context"}
            return schema
        for name, dtype in self.record_dtypes().items():
            f = self.get(name)
            default = f.default if isinstance(f, (NumericFeature, CategoricalFeature)) else None
            shape: list[int | None] = [f.dim] if isinstance(f, VectorFeature) else [None] if isinstance(f, ListFeature) else []
            schema[name] = {"dtype": dtype, "shape": shape, "default": "" if isinstance(f, TextFeature)
                            else default if default != "mean" else None}
        return schema

    def parse_spec(self, columns: tuple[str, ...] | None = None) -> dict[str, Any]:
        """`tf.io.parse_example` features for the given record columns (all stored columns by default)."""
        import tensorflow as tf

        schema = self.record_schema()
        out = {}
        for name in columns or self.stored_columns:
            col = schema[name]
            dtype = tf.as_dtype(col["dtype"])
            if col["shape"] == [None]:  # a list: its elements, as many as the record holds
                out[name] = tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
            else:
                out[name] = tf.io.FixedLenFeature(col["shape"], dtype, default_value=col["default"])
        return out

    def dense_lists(self, parsed: dict[str, Any]) -> dict[str, Any]:
        """`parsed` (what `parse_spec` gave `tf.io.parse_example`) with each list's ragged elements as the model takes
        them: [batch, max_length], cut, padded with `features.text.PAD`."""
        from tfos_jobs.features.text import PAD

        for f in self.of_kind("list"):
            if f.name in parsed:
                parsed[f.name] = parsed[f.name][:, :f.max_length].to_tensor(default_value=PAD, shape=[None, f.max_length])
        return parsed

    def sequence_parse_spec(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """`tf.io.parse_sequence_example` (context, sequence) features of window records."""
        import tensorflow as tf

        context, lists = {}, {}
        for name, col in self.record_schema().items():
            dtype = tf.as_dtype(col["dtype"])
            if col["part"] == "feature_list":
                lists[name] = tf.io.FixedLenSequenceFeature([], dtype)
            else:
                context[name] = tf.io.FixedLenFeature([], dtype)
        return context, lists

    # -- serialisation -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "features": [_feature_to_dict(f) for f in self.features],
            "records": self.record_schema(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FeatureSpec":
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise ConfigError(f"feature spec format_version {version!r} is not supported (expected {FORMAT_VERSION})")
        features = []
        for item in data["features"]:
            item = dict(item)
            kind = item.get("kind")
            if kind not in FEATURE_KINDS:
                raise ConfigError(f"feature {item.get('name')!r}: unknown kind {kind!r}")
            cls_ = FEATURE_KINDS[kind]
            tuples = {f.name for f in fields(cls_) if str(f.type).startswith("tuple")}
            features.append(cls_(**{k: tuple(v) if k in tuples else v for k, v in item.items()}))
        return cls(tuple(features)).check()

    @classmethod
    def from_json(cls, text: str) -> "FeatureSpec":
        return cls.from_dict(json.loads(text))

    def input_dtype(self, name: str) -> str:
        """The dtype of a model input: float32 for numbers and vectors, string for the others."""
        return "float32" if self.get(name).kind in ("numeric", "vector") else "string"

    def input_shape(self, name: str) -> tuple[int, ...]:
        """A model input's shape per row: a list padded to `max_length` (with `features.text.PAD`), a vector's `dim`,
        nothing for a scalar or a text (the model tokenizes it)."""
        f = self.get(name)
        return (f.max_length,) if isinstance(f, ListFeature) else (f.dim,) if isinstance(f, VectorFeature) else ()

    def fingerprint(self) -> str:
        """A hash of the spec's meaning: equal specs give equal fingerprints."""
        canonical = json.dumps([_feature_to_dict(f) for f in self.features], sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def with_feature(self, feature: Feature) -> "FeatureSpec":
        """A copy with the feature of the same name replaced (used to record resolved defaults)."""
        return FeatureSpec(tuple(feature if f.name == feature.name else f for f in self.features))


def _bag_errors(f: Bag, where: str) -> list[str]:
    errs = []
    if f.top_k is not None and f.top_k < 1:
        errs.append(f"{where}.top_k: must be >= 1 (or left out for no limit), got {f.top_k}")
    for attr in ("min_count", "num_oov_buckets", "embedding_dim", "max_tokens" if isinstance(f, TextFeature) else "max_length"):
        if getattr(f, attr) < 1:
            errs.append(f"{where}.{attr}: must be >= 1, got {getattr(f, attr)}")
    if isinstance(f, TextFeature) and f.ngrams not in (1, 2):
        errs.append(f"{where}.ngrams: 1 (words) or 2 (words and pairs of neighbours), got {f.ngrams}")
    if f.combiner not in COMBINERS:
        errs.append(f"{where}.combiner: {f.combiner!r} is not one of {', '.join(map(repr, COMBINERS))}")
    return errs


def _feature_to_dict(f: Feature) -> dict[str, Any]:
    """The feature's settings, but for those its numeric encoding does not read and an unset
    `hash_buckets`: a spec that does not use them reads and hashes (`fingerprint`) as before they existed."""
    d = asdict(f)
    if isinstance(f, NumericFeature):
        unused = {k for settings in ENCODING_SETTINGS.values() for k in settings}
        unused -= set(ENCODING_SETTINGS.get(f.encoding, ()))
        d = {k: v for k, v in d.items() if k not in unused and (k != "encoding" or v != NumericEncoding.LINEAR)}
    if isinstance(f, CategoricalFeature) and not f.hashed:
        del d["hash_buckets"]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
