"""Reading a config: TOML files (local or on a Hadoop filesystem), `extends`, settings by dotted key (typed, or the
command line's `--set key=value`), and the typed build that names the key of every value that does not fit."""
from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal, Mapping, TypeVar, Union

from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FEATURE_KINDS, FeatureSpec

T = TypeVar("T")
Table = Mapping[str, object]  # a TOML table as Python holds it (tomllib's dicts): what build() checks, key by key


def read_config_file(path: str | Path, _seen: tuple = ()) -> dict[str, Any]:
    """A config file, on top of the file its `extends` key names (relative to it), if any. The file may be local or on a
    Hadoop filesystem (hdfs://..., read under spark-submit).

    Tables merge key by key and the file's values win, except that a `[sources.<name>]` table replaces the base's source
    of that name whole (a path left over from a Parquet source would mean nothing to a JDBC one)."""
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
        assert isinstance(where, Path)  # a local file's path, resolved above
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


def apply_override(raw: dict[str, Any], item: str) -> None:
    """`a.b.c=value` (a `--set` item): the value is read as a TOML value when it parses as one, else as a string."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. prepare.split.eval_fraction=0.25")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    set_value(raw, key, value)


def set_value(raw: dict[str, Any], key: str, value: object) -> None:
    """Sets the dotted `key` of a config's tables, making the tables on its way."""
    node = raw
    parts = _split_key(key)
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part, {})
        if not isinstance(nxt, Mapping):
            raise ConfigError(f"{key}: {'.'.join(parts[: i + 1])} is a value, not a table")
        node[part] = node = dict(nxt)  # a plain copy: a section's own mapping (ModelParams) may be read-only
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


def build_spec(features: Mapping[str, Any]) -> FeatureSpec:
    built = []
    for name, body in features.items():
        where = f"features.{name}"
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: expected a table with a kind, got {body!r}")
        kind = body.get("kind")
        if kind not in FEATURE_KINDS:
            raise ConfigError(f"{where}.kind: {kind!r} is not one of: {', '.join(FEATURE_KINDS)}")
        built.append(build(FEATURE_KINDS[kind], {**body, "name": name}, where))
    return FeatureSpec(tuple(built)).check()


def build(cls: type, data: Any, where: str) -> Any:
    if dataclasses.is_dataclass(data) and isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'}: expected a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in known:
            # a table with a free `params` table ([train.model.params]) takes anyone's own settings there
            free = f"; settings of your own go under {_join(where, 'params')}" if "params" in known else ""
            raise ConfigError(f"{_join(where, key)}: unknown key; allowed keys: {', '.join(known)}{free}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = _join(where, f.name)
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key}: required key is missing")
    return cls(**kwargs)


def as_loaded(section: T, where: str) -> T:
    """A config section built in code rather than read from a file, its values checked as the
    loader checks a file's (the same errors, naming the key); nested sections too."""
    values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}  # type: ignore[arg-type]
    nested = {k: as_loaded(v, _join(where, k)) for k, v in values.items() if dataclasses.is_dataclass(v)
              and not isinstance(v, type) and not isinstance(v, FeatureSpec)}
    return build(type(section), {**values, **nested}, where)


_NUMBERS: dict[Any, tuple[tuple[Any, ...], str]] = {
    bool: ((bool,), "true or false"), int: ((int,), "an integer"), float: ((int, float), "a number")}


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
    if tp in _NUMBERS:
        kinds, wanted = _NUMBERS[tp]
        if isinstance(value, bool) != (tp is bool) or not isinstance(value, kinds):
            raise ConfigError(f"{where}: expected {wanted}, got {value!r}")
        return float(value) if tp is float else value
    if tp is bytes:  # no TOML value: a dataclass built from plain data that is not all text (NodeArgs.model_fn)
        if not isinstance(value, bytes):
            raise ConfigError(f"{where}: expected bytes, got {type(value).__name__}")
        return value
    if tp is str:
        if isinstance(value, (dt.date, dt.time)):  # a TOML date or time (`as_of = 2026-01-01`): its ISO text
            return value.isoformat()
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
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a type hint: a class, never an instance
        return build(tp, value, where)
    raise TypeError(f"unsupported config type {tp!r} at {where}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
