"""Any SavedModel as a SQL function: its arguments and result read from one of its signatures.

A model `tfos train` did not export carries no feature spec; its signature says what it takes and gives: each input's
name, dtype and shape, each output's. The SQL function takes the inputs in the signature's order (by name), each a
number, a string, a boolean, or an array of them for an input of shape `[k]`, and returns a struct of the outputs
(an array for an output with one more dimension than the batch). A row with a null argument is not scored: its result
is null and counted. The signature is tried on a check batch at registration, so a model whose graph does not give
what its signature says is refused before any query runs.

    from udfs import register
    score = register(spark, "score", "s3a://models/churn", signature="serving_default")
    spark.sql("SELECT score(tenure, plan_codes) AS s FROM customers")   # s.probability, s.embedding, ...
"""
from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, SparkSession
from pyspark.sql import types as T
from pyspark.sql.functions import ArrowUDFType, arrow_udf, call_function

from tfos_jobs import sessions
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.storage import Storage, named
from tfos_jobs.tf_import import tensorflow
from udfs import shipping
from udfs.argument_check import NULL_TYPE, check_inputs_at_analysis
from udfs.model_location import version_of
from udfs.saved_model_check import refuse_python_bodies

NULL_ROWS = "null_rows"  # the counter of rows with a null argument, not scored
ROWS = "rows"
CHECK_ROWS = 2  # the registration's check batch

# A tensor dtype -> the SQL type that carries it and that type's Arrow type (SQL has no unsigned byte: uint8 widens).
_SQL: dict[str, tuple[T.DataType, pa.DataType]] = {
    "float32": (T.FloatType(), pa.float32()), "float64": (T.DoubleType(), pa.float64()),
    "int32": (T.IntegerType(), pa.int32()), "int64": (T.LongType(), pa.int64()), "int16": (T.ShortType(), pa.int16()),
    "int8": (T.ByteType(), pa.int8()), "uint8": (T.ShortType(), pa.int16()), "bool": (T.BooleanType(), pa.bool_()),
    "string": (T.StringType(), pa.string())}


@dataclass(frozen=True)
class Tensor:
    """One input or output of a signature: its dtype (`_SQL`'s names) and its shape after the batch
    (`()` a value per row, `(k,)` k of them, None where the signature leaves a size open)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]

    def accepted(self) -> list[str]:
        """The Spark types of the arguments it takes, as the analysis-time check spells them (`argument_check`):
        numbers are cast to its dtype, a bare NULL gives a null result."""
        numbers = ["byte", "short", "integer", "long", "float", "double", "decimal"]
        one = {"string": ["string"], "bool": ["boolean"]}.get(self.dtype, numbers)
        return [f"array<{t}>" for t in one] if self.shape else [*one, NULL_TYPE]

    def sql_type(self) -> T.DataType:
        one = _SQL[self.dtype][0]
        return one if not self.shape else T.ArrayType(one, containsNull=False)

    def __str__(self) -> str:
        return f"{self.name} {self.dtype}[{', '.join('?' if d is None else str(d) for d in (None, *self.shape))}]"


@dataclass(frozen=True)
class Signature:
    """What a SavedModel's signature takes and gives, inputs and outputs by name."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    def return_type(self) -> T.StructType:
        return T.StructType([T.StructField(t.name, t.sql_type(), nullable=True) for t in self.outputs])

    def inputs_json(self) -> str:
        """The inputs as the analysis-time check reads them (`argument_check.inputs_json`'s layout)."""
        return json.dumps([{"name": t.name, "kind": str(t)[len(t.name) + 1:], "types": t.accepted()}
                           for t in self.inputs])


def read_signature(signatures: Any, name: str, where: str) -> Signature:
    """`name` among a loaded SavedModel's `signatures`, as a Signature; refused, naming `where` and the tensor, when
    it takes or gives what a SQL function cannot carry (a rank above 2, an unknown batch layout, a dtype SQL lacks)."""
    if name not in signatures:
        raise ConfigError(f"{where}: no signature {name!r}; it has {sorted(signatures)}")
    fn = signatures[name]
    args, kwargs = fn.structured_input_signature
    if args:
        raise ConfigError(f"{where}: signature {name!r} takes positional inputs; a SQL function needs named ones")
    inputs = tuple(_tensor(n, spec, where, name, "input") for n, spec in sorted(kwargs.items()))
    outputs = tuple(_tensor(n, spec, where, name, "output") for n, spec in sorted(fn.structured_outputs.items()))
    if not inputs or not outputs:
        raise ConfigError(f"{where}: signature {name!r} has no {'inputs' if not inputs else 'outputs'}")
    return Signature(name, inputs, outputs)


def _tensor(name: str, spec: Any, where: str, signature: str, role: str) -> Tensor:
    dtype = "string" if spec.dtype.name == "string" else spec.dtype.as_numpy_dtype().dtype.name
    dims = spec.shape.as_list() if spec.shape.rank is not None else None
    if dtype not in _SQL:
        raise ConfigError(f"{where}: signature {signature!r} {role} {name!r} is {dtype}, which SQL cannot carry")
    if dims is None or not 1 <= len(dims) <= 2:
        raise ConfigError(f"{where}: signature {signature!r} {role} {name!r} has shape {spec.shape}; a SQL function "
                          "takes and gives [batch] (a value per row) or [batch, k] (an array per row)")
    return Tensor(name, dtype, tuple(dims[1:]))


def check_batch(signature: Signature) -> dict[str, np.ndarray]:
    """`CHECK_ROWS` rows of zeros (empty strings), each array input of one element where its size is open."""
    batch = {}
    for t in signature.inputs:
        shape = (CHECK_ROWS, *(d or 1 for d in t.shape))
        batch[t.name] = np.full(shape, b"", dtype=object) if t.dtype == "string" else np.zeros(shape, dtype=t.dtype)
    return batch


def check_signature(fn: Callable[..., Any], signature: Signature, where: str) -> None:
    """The signature run on a check batch gives each output it declares, one per row, of its dtype and shape;
    what it raises, or gives otherwise, refuses the model naming `where`."""
    tf = tensorflow()
    try:
        out = fn(**{k: tf.constant(v) for k, v in check_batch(signature).items()})
    except Exception as e:  # the graph's own error, whatever its type
        raise ConfigError(f"{where}: signature {signature.name!r} fails on a check batch of {CHECK_ROWS} rows of "
                          f"zeros: {graph_error(e)}") from None
    for t in signature.outputs:
        got = out[t.name]
        dtype = "string" if got.dtype == tf.string else got.dtype.name
        shape = tuple(got.shape.as_list())
        fits = dtype == t.dtype and len(shape) == 1 + len(t.shape) and shape[0] == CHECK_ROWS and all(
            d is None or d == s for d, s in zip(t.shape, shape[1:]))
        if not fits:
            raise ConfigError(f"{where}: signature {signature.name!r} declares {t}, its graph gives {dtype}{list(shape)} "
                              f"for {CHECK_ROWS} rows")


def graph_error(e: Exception) -> str:
    """What a graph's error says, without TensorFlow's framing (which node, where it was traced)."""
    framing = ("Graph execution error", "Detected at node", "<stack traces", "[[", "File ")
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith(framing)]
    return lines[0] if lines else type(e).__name__


# -- the executors' side ---------------------------------------------------------------------------------------

_lock = threading.Lock()
_loaded: OrderedDict[str, Any] = OrderedDict()
CAPACITY = 2  # models kept loaded per Python worker


def _function(local_dir: str, version: str, signature: str) -> Any:
    key = f"{version}/{signature}"
    with _lock:
        if key in _loaded:
            _loaded.move_to_end(key)
            return _loaded[key][1]
    model = tensorflow().saved_model.load(local_dir)
    with _lock:
        _loaded[key] = (model, model.signatures[signature])  # the loaded object keeps the function's variables
        while len(_loaded) > CAPACITY:
            _loaded.popitem(last=False)
    return _loaded[key][1]


def to_tensor(t: Tensor, column: pa.Array, keep: np.ndarray) -> np.ndarray:
    """The rows `keep` of an Arrow column as the input `t` takes them (cast to its dtype; arrays of its size)."""
    column = column.filter(pa.array(keep)) if not keep.all() else column
    if not t.shape:
        values = column.to_numpy(zero_copy_only=False)
        return values.astype(object) if t.dtype == "string" else values.astype(t.dtype)
    lengths = np.asarray(column.value_lengths().to_numpy(zero_copy_only=False))
    width = t.shape[0] if t.shape[0] is not None else (int(lengths[0]) if len(lengths) else 0)
    if (lengths != width).any():
        bad = int(lengths[lengths != width][0])
        raise TfosError(f"argument {t.name}: an array of {bad} elements where the model takes {width}")
    flat = column.flatten().to_numpy(zero_copy_only=False)
    if column.flatten().null_count:
        raise TfosError(f"argument {t.name}: an array holds a null element; the model takes none")
    flat = flat.astype(object) if t.dtype == "string" else flat.astype(t.dtype)
    return flat.reshape(len(lengths), width)


def to_arrow(t: Tensor, values: np.ndarray) -> pa.Array:
    if t.dtype == "string":
        values = np.array([v.decode("utf-8", "replace") for v in values.reshape(-1)], dtype=object).reshape(values.shape)
    if not t.shape:
        return pa.array(values)
    rows, width = values.shape[0], int(np.prod(values.shape[1:]))
    return pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * width), pa.array(values.reshape(-1)))


def arrow_type(t: Tensor) -> pa.DataType:
    one = _SQL[t.dtype][1]
    return pa.list_(one) if t.shape else one


def score_columns(fn: Any, signature: Signature, columns: list[pa.Array], counts: dict[str, int]) -> pa.StructArray:
    """One batch: the rows with every argument scored, the others null and counted."""
    tf = tensorflow()
    rows = len(columns[0])
    keep = np.ones(rows, dtype=bool)
    for column in columns:
        if column.null_count:
            keep &= ~np.asarray(column.is_null().to_numpy(zero_copy_only=False))
    counts[ROWS] = counts.get(ROWS, 0) + rows
    names = [t.name for t in signature.outputs]
    if keep.any():
        out = fn(**{t.name: tf.constant(to_tensor(t, c, keep)) for t, c in zip(signature.inputs, columns)})
        scored = [to_arrow(t, out[t.name].numpy()).cast(arrow_type(t)) for t in signature.outputs]
    else:
        scored = [pa.array([], type=arrow_type(t)) for t in signature.outputs]
    if keep.all():
        return pa.StructArray.from_arrays(scored, names=names)
    counts[NULL_ROWS] = counts.get(NULL_ROWS, 0) + int((~keep).sum())
    at = pa.array(np.where(keep, np.cumsum(keep) - 1, 0), mask=~keep)  # a null index gives a null row
    return pa.StructArray.from_arrays([a.take(at) for a in scored], names=names, mask=pa.array(~keep))


def make_function(model: shipping.ShippedModel, signature: Signature, counter: Any, batch_size: int | None = None
                  ) -> Callable[[Iterator[Any]], Iterator[pa.Array]]:
    """The Arrow iterator function behind the SQL function, calling the model on `batch_size` rows (None: on each
    Arrow batch); captures plain values and an accumulator."""

    def predict(batches: Iterator[Any]) -> Iterator[pa.Array]:
        from udfs.predict import in_batches_of

        fn = _function(shipping.local_copy(model), model.version, signature.name)
        names = [t.name for t in signature.inputs]
        for batch in batches if batch_size is None else in_batches_of(batch_size, batches):
            columns = [batch] if not isinstance(batch, (tuple, list)) else list(batch)
            if len(columns) == 1 and pa.types.is_struct(columns[0].type):  # score(struct(*)): the fields by name
                fields = dict(zip([f.name for f in columns[0].type], columns[0].flatten()))  # the struct's nulls kept
                missing = [n for n in names if n not in fields]
                if missing:
                    raise TfosError(f"the struct argument lacks the model's input(s) {missing}")
                columns = [fields[n] for n in names]
            counts: dict[str, int] = {}
            out = score_columns(fn, signature, columns, counts)
            if counter is not None:
                counter.add(counts)
            yield out

    return predict


# -- the driver's side -----------------------------------------------------------------------------------------

@dataclass(repr=False)
class SignatureUdf:
    """A SavedModel's signature registered as a SQL function: call it on columns, or by `name` in SQL."""

    name: str
    export_dir: str
    signature: Signature
    udf: Any
    counter: Any
    version: str = ""
    checked: bool = False  # whether the analyzer checks its arguments (the package's jar is in the session)

    def __call__(self, *cols: Column | str) -> Column:
        """The function on DataFrame columns: the signature's inputs by name, or none for columns named as they are."""
        return call_function(self.name, *(cols or [t.name for t in self.signature.inputs]))

    def counts(self) -> dict[str, int]:
        """Rows scored and rows with a null argument, over every query that used it so far."""
        if self.counter is None:
            raise TfosError(f"{self.name}: a function registered from a Spark Connect client keeps no counters")
        return dict(sorted(self.counter.value.items()))

    def __repr__(self) -> str:
        return (f"SignatureUdf(name={self.name!r}, model={self.export_dir!r}, signature={self.signature.name!r}, "
                f"inputs={[str(t) for t in self.signature.inputs]})")


def register_signature(spark: SparkSession, name: str, export_dir: str, *, signature: str, setting: str,
                       counter_param: Any, batch_size: int | None = None) -> SignatureUdf:
    """`name` in `spark` scoring with `signature` of the SavedModel in `export_dir` (qualified; errors name
    `setting`) on `batch_size` rows per call, after its graph gave what the signature says on a check batch."""
    storage = Storage(spark)
    with named(setting, export_dir):
        version = version_of(storage, export_dir)
        local_dir = shipping.fetch(storage, export_dir, version)
    where = f"{setting} {export_dir!r}"
    try:
        loaded = tensorflow().saved_model.load(local_dir)
    except Exception as e:  # TF raises several types for unreadable models
        raise ConfigError(f"{where}: cannot load the SavedModel: {str(e).splitlines()[0]}") from None
    read = read_signature(loaded.signatures, signature, where)
    refuse_python_bodies(loaded.signatures, (signature,), where)
    check_signature(loaded.signatures[signature], read, where)
    model = shipping.ship(spark, local_dir, version)
    counter = None if sessions.is_connect(spark) else spark.sparkContext.accumulator({}, counter_param)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        udf = arrow_udf(make_function(model, read, counter, batch_size),  # type: ignore[call-overload]
                        read.return_type(), ArrowUDFType.SCALAR_ITER)
    registered = spark.udf.register(name, udf)
    checked = check_inputs_at_analysis(spark, name, read.inputs_json())
    return SignatureUdf(name, export_dir, read, registered, counter, version, checked)
