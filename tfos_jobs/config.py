"""Configuration: TOML in `conf/` -> frozen dataclasses, with `--set key=value` overrides.

Everything is checked here, before any Spark job starts; an error names the key (as a dotted
path, the way it is written with `--set`) and what it allows.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, Union

from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FEATURE_KINDS, FeatureSpec
from tfos_jobs.model.exchange import EXCHANGES

SEQUENCE_MODEL = "sequence_autoencoder"
FILE_FORMATS = ("parquet", "csv", "json", "orc", "adult_csv")
SOURCE_FORMATS = FILE_FORMATS + ("table", "jdbc")


@dataclass(frozen=True)
class SparkConfig:
    """Session settings. `master` applies only when spark-submit did not set one.

    `packages` (Maven coordinates, e.g. JDBC drivers) are fetched from Maven Central when the
    session starts; `jars` are local jar files, for clusters without access to it. `hive = true`
    gives the session a Hive metastore catalog: the one `hive-site.xml` or
    `spark.hadoop.hive.metastore.uris` names, else an embedded Derby metastore kept with the
    table files under `warehouse`."""

    master: Union[str, None] = None
    app_name: str = "tfos"
    conf: Mapping[str, str] = field(default_factory=dict)
    packages: tuple[str, ...] = ()
    jars: tuple[str, ...] = ()
    hive: bool = False
    warehouse: str = "spark-warehouse"


@dataclass(frozen=True)
class SourceConfig:
    """One input table: a path in a file format, a catalog table, or a JDBC table or query.

    `filter` is a SQL condition applied where the data is read: it prunes a partitioned table's
    partitions and is pushed down to a database. A JDBC password is never written here:
    `password_env` names an environment variable that holds it, `password_file` a file."""

    format: Literal["parquet", "csv", "json", "orc", "adult_csv", "table", "jdbc"]
    path: Union[str, None] = None
    table: Union[str, None] = None
    schema: Union[str, None] = None
    filter: Union[str, None] = None
    options: Mapping[str, str] = field(default_factory=dict)
    password_env: Union[str, None] = None
    password_file: Union[str, None] = None
    connect_timeout: int = 10  # seconds to reach a database server before the source is declared unreachable

    def location(self) -> str:
        where = self.path or self.table or self.options.get("dbtable", "") or self.options.get("query", "")
        if self.format == "jdbc" and "url" in self.options:
            return f"{where} at {self.options['url']}"
        return where


@dataclass(frozen=True)
class LookupConfig:
    """A small dimension table, broadcast-joined to the main table (left join)."""

    source: str
    left_on: str
    right_on: str


@dataclass(frozen=True)
class ActivityConfig:
    """An event log aggregated per example key into activity features."""

    source: str
    key: str
    timestamp: str = "ts"
    event_column: str = "event_type"
    click_value: str = "click"
    impression_value: str = "impression"
    as_of: Union[str, None] = None  # ISO date; events on or after it are excluded. Default: day after the last event.


@dataclass(frozen=True)
class SplitConfig:
    """Train/eval split: by a hash of the key column, or by a column holding "train"/"eval"."""

    mode: Literal["hash", "column"] = "hash"
    eval_fraction: float = 0.2
    column: Union[str, None] = None
    salt: str = ""


@dataclass(frozen=True)
class PrepareConfig:
    main: str
    output: str
    union: tuple[str, ...] = ()  # more sources with main's columns (e.g. the same table in another format), appended
    lookups: tuple[LookupConfig, ...] = ()
    activity: Union[ActivityConfig, None] = None
    split: SplitConfig = SplitConfig()
    files_per_split: int = 8
    compression: Literal["none", "gzip"] = "none"
    tfrecord_format: str = "tfos.spark.tfrecord"
    bad_rows: Literal["quarantine", "strict"] = "quarantine"  # malformed CSV/JSON rows: set aside, or fail
    overwrite: bool = False


@dataclass(frozen=True)
class SyntheticConfig:
    """The embedded census-like data set: `people`, `regions` and `events` tables."""

    output: str = "demo-output/raw"
    people: int = 100_000
    events_per_person: float = 20.0
    seed: int = 42
    as_of: str = "2026-01-01"


@dataclass(frozen=True)
class FleetConfig:
    """The embedded sensor fleet: one file per asset under `<output>/sensors` (every
    `csv_every`-th asset as CSV, the rest Parquet) and the true anomaly intervals, which no
    model sees, under `<output>/anomalies`. The time step is the time feature's."""

    output: str = "demo-output/fleet/raw"
    assets: int = 200
    steps: int = 20_000
    seed: int = 42
    csv_every: int = 10


@dataclass(frozen=True)
class ModelConfig:
    """The model: `wide_deep` (built from the spec), `sequence_autoencoder` (for sequence
    features) or a user function given as "module:function".

    Hidden layers of the deep part, as in the census wide & deep sample: `num_layers` layers,
    the first of `first_layer_size` units, each next one `scale_factor` times the previous.
    The autoencoder: a `cell` ("gru" or "lstm") encoder of `units` to a `latent_dim` vector, a
    decoder of the same size; windows whose reconstruction error is above the
    `anomaly_quantile` of the train windows' errors are flagged as anomalies."""

    kind: str = "wide_deep"
    first_layer_size: int = 100
    num_layers: int = 4
    scale_factor: float = 0.7
    dropout: float = 0.0
    cell: Literal["gru", "lstm"] = "gru"
    units: int = 32
    latent_dim: int = 16
    anomaly_quantile: float = 0.99

    def hidden_units(self) -> tuple[int, ...]:
        return tuple(max(2, round(self.first_layer_size * self.scale_factor**i)) for i in range(self.num_layers))


@dataclass(frozen=True)
class TrainConfig:
    dataset: str = "demo-output/dataset"
    model_dir: str = "demo-output/model"
    strategy: Literal["multi_worker_mirrored", "parameter_server", "local"] = "multi_worker_mirrored"
    workers: int = 2  # TF workers, the chief included (parameter_server: workers besides the chief)
    ps: int = 1  # parameter servers (parameter_server only)
    gpus_per_worker: int = 0
    gpu_discovery_script: str = ""  # what Spark runs to find an executor's GPUs; "" = the one the package ships
    epochs: int = 5
    steps_per_epoch: Union[int, None] = None  # default: one pass over the train split per epoch
    batch_size: int = 512  # per worker (parameter_server: per step, each step on one worker)
    optimizer: Literal["adam", "adagrad", "sgd", "rmsprop", "ftrl"] = "adam"
    learning_rate: float = 0.001
    early_stopping_patience: int = 0  # epochs without improvement of val_loss; 0 = off
    shuffle_buffer: int = 10_000  # records, when a worker's share of the train split streams from its files
    in_memory_mb: int = 1024  # a worker's share of a split up to this many MB of TFRecords is read once into memory
    seed: int = 42
    reservation_timeout: int = 120  # seconds to wait for executors and TF nodes to start
    step_timeout: int = 600  # seconds without a finished step before the run is declared hung
    max_attempts: int = 3  # TF cluster launches; a relaunch resumes from the last finished epoch
    steps_per_execution: int = 20  # training steps per call into TensorFlow (per scheduled function under PS)
    dense_gradient_limit: int = 262_144  # embedding tables of up to this many values send dense gradients
    # multi_worker_mirrored: how the gradients are summed across workers (model/exchange.py);
    # auto = one all-gather with two workers or small gradients, else the ring all-reduce
    gradient_exchange: Literal[EXCHANGES] = "auto"
    threads: int = 0  # TensorFlow compute threads per TF node; 0 = the Spark task's CPUs (spark.task.cpus)
    profile_steps: int = 0  # > 0: after training, time this many steps' parts (metrics.json step_profile)
    control_bind: str = ""  # reservation server address; "" = spark.driver.bindAddress, else spark.driver.host
    control_ports: str = ""  # reservation server port or range ("9000-9010"); "" = any free port
    tf_ports: str = ""  # port range for the TF nodes' gRPC servers ("30000-30999"); "" = any free port
    tensorboard: bool = True  # event files in <model_dir>/logs
    # where TF nodes keep their copy of the dataset and their own files on an executor's disk;
    # "" = the executor's temporary directory. Parameter-server workers need the same path on every host.
    local_dir: str = ""
    overwrite: bool = False
    model: ModelConfig = ModelConfig()


@dataclass(frozen=True)
class PredictConfig:
    """Batch prediction and SQL: which model, under which SQL name, on what input."""

    model: str = "demo-output/model"
    name: str = "predict"  # the SQL function name
    input: Union[str, None] = None  # a source name; default: the main source joined as in prepare
    output: str = "demo-output/predictions"
    output_table: Union[str, None] = None  # write a catalog (Hive) table instead of Parquet files
    output_source: Union[str, None] = None  # or a database table: the name of a jdbc source
    partition_by: tuple[str, ...] = ()  # columns the output is partitioned by (files and catalog tables)
    # create: fail if the output exists; overwrite: replace it; overwrite_partitions: replace only
    # the partitions this run writes; append: add the rows to it.
    mode: Literal["create", "overwrite", "overwrite_partitions", "append"] = "create"
    batch_size: int = 10_000  # rows per Arrow batch handed to the model


@dataclass(frozen=True)
class Config:
    features: FeatureSpec
    sources: Mapping[str, SourceConfig]
    prepare: PrepareConfig
    spark: SparkConfig = SparkConfig()
    synthetic: SyntheticConfig = SyntheticConfig()
    fleet: FleetConfig = FleetConfig()
    train: TrainConfig = TrainConfig()
    predict: PredictConfig = PredictConfig()


# -- loading -----------------------------------------------------------------------------------


def load(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read a TOML file, apply `key=value` overrides, build and validate the config."""
    raw = read_config_file(path)
    for item in overrides:
        apply_override(raw, item)
    return from_dict(raw)


def read_config_file(path: str | Path, _seen: tuple = ()) -> dict[str, Any]:
    """A config file, on top of the file its `extends` key names (relative to it), if any. The
    file may be local or on a Hadoop filesystem (hdfs://..., read under spark-submit).

    Tables merge key by key and the file's values win, except that a `[sources.<name>]` table
    replaces the base's source of that name whole (a path left over from a Parquet source would
    mean nothing to a JDBC one)."""
    remote = is_url(str(path))
    where: str | Path = str(path) if remote else Path(path).resolve()
    if where in _seen:
        raise ConfigError(f"extends: {str(where)!r} extends itself (through {' -> '.join(map(str, _seen))})")
    raw = read_toml(where, "config file")
    base_name = raw.pop("extends", None)
    if base_name is None:
        return raw
    if not isinstance(base_name, str):
        raise ConfigError(f"extends: expected a file name, got {base_name!r}")
    if remote:
        base: str | Path = base_name if is_url(base_name) else f"{str(where).rsplit('/', 1)[0]}/{base_name}"
    else:
        base = where.parent / base_name
    return _extended(read_config_file(base, (*_seen, where)), raw)


def is_url(path: str) -> bool:
    """A path with a scheme (hdfs://, s3a://, abfs://, gs://, ...) other than file:."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme != "file"


def _extended(base: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    sources = {**base.get("sources", {}), **raw.get("sources", {})}
    merged = _merge(base, raw)
    if sources:
        merged["sources"] = sources
    return merged


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The parsed file; a missing or malformed one is a ConfigError naming `what` and the path."""
    if is_url(str(path)):
        return _parse_toml(_remote_text(str(path), what), what, str(path))
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(path)!r} does not exist") from None
    return _parse_toml(text, what, str(path))


def _remote_text(url: str, what: str) -> str:
    from tfos_jobs.storage import HadoopFS, StorageError, translated

    try:
        with translated(url):
            return HadoopFS.before_session(url).read_text(url)
    except StorageError as e:
        raise ConfigError(f"{what} {url!r} cannot be read: {e}") from None


def _parse_toml(text: str, what: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{what} {where!r} is not valid TOML: {e}") from None


def from_dict(raw: Mapping[str, Any]) -> Config:
    raw = dict(raw)
    features = raw.pop("features", None)
    if not isinstance(features, Mapping) or not features:
        raise ConfigError("features: required table is missing (one [features.<name>] table per feature)")
    spec = _build_spec(features)
    sources = raw.pop("sources", None)
    if not isinstance(sources, Mapping) or not sources:
        raise ConfigError("sources: required table is missing (one [sources.<name>] table per input)")
    built_sources = {name: _build(SourceConfig, s, f"sources.{name}") for name, s in sources.items()}
    config = _build(Config, {**raw, "features": spec, "sources": built_sources}, "")
    validate(config)
    return config


def apply_override(raw: dict[str, Any], item: str) -> None:
    """`a.b.c=value`: the value is read as a TOML value when it parses as one, else as a string."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. prepare.split.eval_fraction=0.25")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    node = raw
    parts = _split_key(key)
    for i, part in enumerate(parts[:-1]):
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parts[: i + 1])} is a value, not a table")
        node = nxt
    node[parts[-1]] = value


# Tables whose keys are free-form (Spark settings, reader options): the rest of a dotted
# override key after them is one key, e.g. spark.conf.spark.sql.shuffle.partitions=4.
_FREE_FORM = (("spark", "conf"), ("sources", "*", "options"))


def _split_key(key: str) -> list[str]:
    parts = key.split(".")
    for pattern in _FREE_FORM:
        n = len(pattern)
        if len(parts) > n and all(p == "*" or p == q for p, q in zip(pattern, parts)):
            return parts[:n] + [".".join(parts[n:])]
    return parts


def _build_spec(features: Mapping[str, Any]) -> FeatureSpec:
    built = []
    for name, body in features.items():
        where = f"features.{name}"
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: expected a table with a kind, got {body!r}")
        kind = body.get("kind")
        if kind not in FEATURE_KINDS:
            raise ConfigError(f"{where}.kind: {kind!r} is not one of: {', '.join(FEATURE_KINDS)}")
        built.append(_build(FEATURE_KINDS[kind], {**body, "name": name}, where))
    return FeatureSpec(tuple(built)).check()


def _build(cls: type, data: Any, where: str) -> Any:
    if dataclasses.is_dataclass(data) and isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'}: expected a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in known:
            raise ConfigError(f"{_join(where, key)}: unknown key; allowed keys: {', '.join(known)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = _join(where, f.name)
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key}: required key is missing")
    return cls(**kwargs)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is FeatureSpec:
        return value
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of: {', '.join(map(str, args))}")
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        failures = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where)
            except ConfigError as e:
                failures.append(str(e).split(": ", 1)[1])
        raise ConfigError(f"{where}: {value!r} does not fit; " + " / ".join(failures))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        if args[1] is str:  # settings maps: TOML numbers and booleans are written the way Spark reads them
            value = {k: str(v).lower() if isinstance(v, bool) else str(v) if isinstance(v, (int, float)) else v
                     for k, v in value.items()}
        return {str(k): _convert(args[1], v, _join(where, str(k))) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    raise TypeError(f"unsupported config type {tp!r} at {where}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# -- validation --------------------------------------------------------------------------------


def validate(config: Config) -> None:
    """Cross-field checks; raises one ConfigError listing every problem found."""
    errs: list[str] = []
    names = ", ".join(config.sources)
    for name, src in config.sources.items():
        where = f"sources.{name}"
        if src.format in FILE_FORMATS and not src.path:
            errs.append(f"{where}.path: required for format = {src.format!r}")
        if src.format == "table" and not src.table:
            errs.append(f"{where}.table: required for format = 'table'")
        if src.format == "jdbc" and not ("url" in src.options and ("dbtable" in src.options or "query" in src.options)):
            errs.append(f"{where}.options: format = 'jdbc' needs url and dbtable (or query)")
        errs += _credential_errors(where, src)
    prep = config.prepare
    if prep.main not in config.sources:
        errs.append(f"prepare.main: {prep.main!r} is not a source; sources: {names}")
    for i, name in enumerate(prep.union):
        if name not in config.sources:
            errs.append(f"prepare.union[{i}]: {name!r} is not a source; sources: {names}")
    for i, lk in enumerate(prep.lookups):
        if lk.source not in config.sources:
            errs.append(f"prepare.lookups[{i}].source: {lk.source!r} is not a source; sources: {names}")
    if prep.activity is not None:
        act = prep.activity
        if act.source not in config.sources:
            errs.append(f"prepare.activity.source: {act.source!r} is not a source; sources: {names}")
        if act.as_of is not None:
            try:
                dt.date.fromisoformat(act.as_of)
            except ValueError:
                errs.append(f"prepare.activity.as_of: {act.as_of!r} is not an ISO date (YYYY-MM-DD)")
        if config.features.key is None:
            errs.append("prepare.activity: joining activity needs a feature with kind = \"key\"")
    split = prep.split
    if not 0.0 < split.eval_fraction < 1.0:
        errs.append(f"prepare.split.eval_fraction: must be between 0 and 1 (exclusive), got {split.eval_fraction}")
    if split.mode == "column" and not split.column:
        errs.append("prepare.split.column: required when prepare.split.mode = 'column'")
    if split.mode == "hash" and config.features.key is None:
        errs.append("prepare.split.mode: 'hash' needs a feature with kind = \"key\" to hash")
    if prep.files_per_split < 1:
        errs.append(f"prepare.files_per_split: must be >= 1, got {prep.files_per_split}")
    if not prep.output:
        errs.append("prepare.output: must not be empty")
    tr = config.train
    positive = {"workers": tr.workers, "epochs": tr.epochs, "batch_size": tr.batch_size,
                "reservation_timeout": tr.reservation_timeout, "step_timeout": tr.step_timeout,
                "max_attempts": tr.max_attempts, "steps_per_execution": tr.steps_per_execution,
                "model.first_layer_size": tr.model.first_layer_size,
                "model.num_layers": tr.model.num_layers}
    errs += [f"train.{k}: must be >= 1, got {v}" for k, v in positive.items() if v < 1]
    if tr.strategy == "parameter_server" and tr.ps < 1:
        errs.append(f"train.ps: parameter_server needs at least 1 parameter server, got {tr.ps}")
    for key in ("control_ports", "tf_ports"):
        try:
            ports = parse_ports(getattr(tr, key))
        except ValueError as e:
            errs.append(f"train.{key}: {e}")
            continue
        if key == "tf_ports" and ports != [0] and len(ports) < node_count(tr) and tr.strategy != "local":
            errs.append(f"train.tf_ports: {tr.tf_ports!r} holds {len(ports)} port(s), fewer than the TF cluster's "
                        f"{node_count(tr)} nodes; each node takes a port of its own")
    if tr.steps_per_epoch is not None and tr.steps_per_epoch < 1:
        errs.append(f"train.steps_per_epoch: must be >= 1 (or left out for one pass per epoch), got {tr.steps_per_epoch}")
    if tr.learning_rate <= 0:
        errs.append(f"train.learning_rate: must be > 0, got {tr.learning_rate}")
    for key in ("gpus_per_worker", "early_stopping_patience", "dense_gradient_limit", "threads", "profile_steps",
                "in_memory_mb"):
        if getattr(tr, key) < 0:
            errs.append(f"train.{key}: must be >= 0, got {getattr(tr, key)}")
    if not 0 < tr.model.scale_factor <= 1:
        errs.append(f"train.model.scale_factor: must be in (0, 1], got {tr.model.scale_factor}")
    if not 0 <= tr.model.dropout < 1:
        errs.append(f"train.model.dropout: must be in [0, 1), got {tr.model.dropout}")
    kind, sequence = tr.model.kind, config.features.is_sequence
    if kind not in ("wide_deep", SEQUENCE_MODEL) and ":" not in kind:
        errs.append(f"train.model.kind: {kind!r} is not 'wide_deep', '{SEQUENCE_MODEL}' or 'module:function'")
    elif sequence and kind == "wide_deep" or not sequence and kind == SEQUENCE_MODEL:
        errs.append(f"train.model.kind: {kind!r} does not fit a spec "
                    + ("of sequence features; use 'sequence_autoencoder'" if sequence else "without sequence features"))
    if sequence and (prep.lookups or prep.activity is not None):
        errs.append("prepare: lookups and activity apply to row features, not to sequence windows")
    for key in ("units", "latent_dim"):
        if getattr(tr.model, key) < 1:
            errs.append(f"train.model.{key}: must be >= 1, got {getattr(tr.model, key)}")
    if not 0 < tr.model.anomaly_quantile < 1:
        errs.append(f"train.model.anomaly_quantile: must be between 0 and 1 (exclusive), got {tr.model.anomaly_quantile}")
    fl = config.fleet
    for key in ("assets", "steps", "csv_every"):
        if getattr(fl, key) < 1:
            errs.append(f"fleet.{key}: must be >= 1, got {getattr(fl, key)}")
    pr = config.predict
    if pr.input is not None and pr.input not in config.sources:
        errs.append(f"predict.input: {pr.input!r} is not a source; sources: {names}")
    if pr.output_table and pr.output_source:
        errs.append("predict.output_source: give output_table (a catalog table) or output_source (a database), not both")
    if pr.output_source is not None:
        out = config.sources.get(pr.output_source)
        if out is None or out.format != "jdbc" or "dbtable" not in out.options:
            errs.append(f"predict.output_source: {pr.output_source!r} is not a jdbc source with options.dbtable; "
                        f"sources: {names}")
        elif out.filter:
            errs.append(f"predict.output_source: {pr.output_source!r} has a filter; the table written is counted whole")
        elif pr.partition_by or pr.mode == "overwrite_partitions":
            errs.append("predict.partition_by: a database table is written whole; partitions apply to files and "
                        "catalog tables")
    if pr.mode == "overwrite_partitions" and not pr.partition_by:
        errs.append("predict.mode: 'overwrite_partitions' needs predict.partition_by")
    if pr.batch_size < 1:
        errs.append(f"predict.batch_size: must be >= 1, got {pr.batch_size}")
    if not pr.name.isidentifier():
        errs.append(f"predict.name: {pr.name!r} is not a valid SQL function name")
    syn = config.synthetic
    if syn.people < 1:
        errs.append(f"synthetic.people: must be >= 1, got {syn.people}")
    if syn.events_per_person < 0:
        errs.append(f"synthetic.events_per_person: must be >= 0, got {syn.events_per_person}")
    try:
        dt.date.fromisoformat(syn.as_of)
    except ValueError:
        errs.append(f"synthetic.as_of: {syn.as_of!r} is not an ISO date (YYYY-MM-DD)")
    if errs:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errs))


_SECRET_OPTIONS = ("password", "passwd", "pwd", "secret", "token")


def _credential_errors(where: str, src: SourceConfig) -> list[str]:
    """A password written in the config would be printed by `tfos config` and kept in
    manifests and logs; refuse it without repeating it."""
    errs = []
    for key in src.options:
        if key.lower() in _SECRET_OPTIONS:
            errs.append(f"{where}.options.{key}: a password is never written in the config; name an environment "
                        "variable (password_env) or a file (password_file) that holds it")
    url = src.options.get("url", "")
    if src.format == "jdbc" and url:
        query = url.split("?", 1)[1] if "?" in url else ""
        params = {p.split("=", 1)[0].lower() for p in query.replace("&", ";").split(";") if "=" in p}
        if params & set(_SECRET_OPTIONS) or "@" in url.split("//", 1)[-1].split("/", 1)[0]:
            errs.append(f"{where}.options.url: holds a password; name an environment variable (password_env) "
                        "or a file (password_file) that holds it instead")
        if not url.startswith("jdbc:"):
            errs.append(f"{where}.options.url: a JDBC URL starts with 'jdbc:', e.g. jdbc:postgresql://host:5432/db")
    if src.format != "jdbc" and (src.password_env or src.password_file):
        errs.append(f"{where}: password_env and password_file apply to format = 'jdbc' only")
    if src.password_env and src.password_file:
        errs.append(f"{where}: give password_env or password_file, not both")
    if src.connect_timeout < 1:
        errs.append(f"{where}.connect_timeout: must be >= 1, got {src.connect_timeout}")
    return errs


def node_count(tr: TrainConfig) -> int:
    """Executors the TF cluster needs: MWMS uses `workers` (one of them the chief); PS adds a
    chief (the coordinator) and `ps` parameter servers to `workers`."""
    if tr.strategy == "parameter_server":
        return 1 + tr.workers + tr.ps
    return tr.workers


def parse_ports(spec: str) -> list[int]:
    """A port setting: "" (any free port: [0]), "9000", or a range "9000-9010"."""
    spec = spec.strip()
    if not spec:
        return [0]
    low, _, high = spec.partition("-")
    try:
        first, last = int(low), int(high or low)
    except ValueError:
        raise ValueError(f"{spec!r} is not a port or a range of ports like 9000-9010") from None
    if not 0 < first <= last < 65536:
        raise ValueError(f"{spec!r} is not a port or a range of ports within 1-65535, low-high")
    return list(range(first, last + 1))


def to_dict(config: Config) -> dict[str, Any]:
    """A plain-data view (for printing and for the manifest)."""
    out = dataclasses.asdict(dataclasses.replace(config, features=FeatureSpec(())))
    out["features"] = config.features.to_dict()["features"]
    return out
