"""`tfos serve-sql`: a long-running Spark application that answers SQL clients (beeline, JDBC and
ODBC drivers, DBeaver, Superset, PyHive) over HiveServer2's protocol, with the prediction
functions registered and the sources as views, as `tfos sql` has them.

One Spark session serves every connection (`spark.sql.hive.thriftServer.singleSession`): the functions and views
registered here are what each client sees, and every query runs as this process's user, whatever user name a client logs
in with. SIGHUP re-reads the config and re-registers each function whose model changed (a new export, an alias moved to
another version); queries already running finish on the model they started with. SIGTERM and Ctrl-C stop the server,
then Spark.
"""
from __future__ import annotations

import datetime as dt
import getpass
import os
import signal
import socket
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pyspark.sql import SparkSession

from tfos_jobs.config import Config
from tfos_jobs.config.serve_sql import ServeSqlConfig
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import sql_endpoint as contract
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.jobs.serve import sql
from tfos_jobs.tracking.registry import resolver
from udfs import PredictionUdf, register
from udfs.model_location import served_version

THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
HIVE = "hive.server2."
DRIVER_CLASS_PATH = "spark.driver.extraClassPath"  # read when the driver JVM starts
START_SECONDS = 60.0  # for the server's port to accept connections


@dataclass(frozen=True, repr=False)
class Secrets:
    """The password clients must give and the TLS keystore's: read once at start, never logged."""

    password: str = ""
    keystore_password: str = ""

    def __repr__(self) -> str:
        return "Secrets(<hidden>)"


def read_secrets(settings: ServeSqlConfig, environ: Mapping[str, str] = os.environ) -> Secrets:
    """Before Spark starts: a missing password or keystore stops here, naming the setting."""
    password = ""
    if settings.auth == "password":
        password = (_password_file(settings.password_file) if settings.password_file
                    else _variable(environ, settings.password_env, "serve_sql.password_env"))
    keystore_password = ""
    if settings.tls_keystore:
        if not os.path.isfile(settings.tls_keystore):
            raise ConfigError(f"serve_sql.tls_keystore: {settings.tls_keystore!r} is not a file")
        keystore_password = _variable(environ, settings.tls_keystore_password_env, "serve_sql.tls_keystore_password_env")
    return Secrets(password, keystore_password)


def _variable(environ: Mapping[str, str], name: str, setting: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise ConfigError(f"{setting}: the environment variable {name} is not set or empty")
    return value


def _password_file(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="utf-8") as fh:
            password = fh.read().rstrip("\r\n")
    except OSError as e:
        raise ConfigError(f"serve_sql.password_file: {path!r}: {e.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"serve_sql.password_file: {path!r} can be read by other users (mode "
                          f"{stat.S_IMODE(mode):04o}); make it private: chmod 600 {path}")
    if not password:
        raise ConfigError(f"serve_sql.password_file: {path!r} is empty")
    return password


def session_conf(settings: ServeSqlConfig, spark_conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings the session must start with: one session for every client, the server's
    address, transport and authentication (no secret: those go to the JVM at start), and the
    package's jar on the driver's own class path: HiveServer2 looks the password check up with
    whatever class loader its handler thread has, which need not see `spark.jars`."""
    from tfos_jobs.session_builder import tfrecord_jar

    given = (spark_conf or {}).get(DRIVER_CLASS_PATH, "")
    h = f"spark.hadoop.{HIVE}"
    return {
        DRIVER_CLASS_PATH: os.pathsep.join(p for p in (given, str(tfrecord_jar())) if p),
        "spark.sql.hive.thriftServer.singleSession": "true",
        f"{h}thrift.bind.host": settings.bind,
        f"{h}transport.mode": settings.transport,
        f"{h}thrift.port": str(settings.port),
        f"{h}thrift.http.port": str(settings.port),
        f"{h}thrift.http.path": settings.http_path.strip("/"),
        f"{h}authentication": {"none": "NONE", "password": "CUSTOM", "ldap": "LDAP"}[settings.auth],
        f"{h}use.SSL": str(bool(settings.tls_keystore)).lower(),
        **({f"{h}keystore.path": os.path.abspath(settings.tls_keystore)} if settings.tls_keystore else {}),
    }


def functions(config: Config) -> dict[str, str]:
    """SQL name -> model: `serve_sql.functions`, else `predict.name` serving `predict.model`."""
    return dict(config.serve_sql.functions) or {config.predict.name: config.predict.model}


@dataclass
class Served:
    model: str  # as configured
    udf: PredictionUdf
    registered_at: dt.datetime


class Endpoint:
    """The functions and views one session serves, and their status view."""

    def __init__(self, spark: SparkSession, log: Callable[[str], None]):
        self.spark, self.log = spark, log
        self.served: dict[str, Served] = {}

    def register(self, config: Config, serving: bool = False) -> list[str]:
        """(Re-)register every configured function whose model is new or changed, and drop those
        no longer configured; the names registered. A model that cannot be served raises at
        start; once `serving`, it leaves that function on its current model (or unregistered)."""
        resolve = resolver(config.tracking.uri or None)
        wanted = functions(config)
        changed, failures = [], []
        for name, model in wanted.items():
            setting = f"serve_sql.functions.{name}" if config.serve_sql.functions else "predict.model"
            current = self.served.get(name)
            try:
                if current and current.model == model and \
                        served_version(self.spark, model, setting=setting, resolve=resolve) == current.udf.version:
                    continue
                udf = register(self.spark, name, model, batch_size=config.predict.batch_size, engine=config.predict.engine, setting=setting,
                               resolve=resolve)
            except TfosError as e:
                if not serving:
                    raise
                kept = f"kept the current model of {name}" if current else f"{name} not registered"
                failures.append(f"{kept}: {e}")
                continue
            self.served[name] = Served(model, udf, dt.datetime.now(dt.timezone.utc))
            changed.append(name)
        for name in [n for n in self.served if n not in wanted]:
            self.spark.sql(f"DROP TEMPORARY FUNCTION IF EXISTS {name}")
            del self.served[name]
            changed.append(name)
        for failure in failures:
            self.log(f"tfos serve-sql: error: {failure}")
        self.refresh_status()
        return changed

    def open_views(self, config: Config) -> list[str]:
        main = self.served.get(config.predict.name) or next(iter(self.served.values()), None)
        return sql.open_views(self.spark, config, main.udf.spec if main else config.features)

    def refresh_status(self) -> None:
        """`tfos_functions`: one row per function, its model and its counters so far."""
        from pyspark.sql.types import (LongType, MapType, StringType, StructField, StructType,
                                       TimestampType)

        schema = StructType([
            StructField(contract.FUNCTION, StringType()), StructField(contract.MODEL, StringType()),
            StructField(contract.SERVED, StringType()), StructField(contract.VERSION, StringType()),
            StructField(contract.REGISTERED_AT, TimestampType()), StructField(contract.ROWS, LongType()),
            StructField(contract.NULLS, LongType()), StructField(contract.UNSEEN, LongType()),
            StructField(contract.COUNTS, MapType(StringType(), LongType())),
        ])
        rows = []
        for name, s in sorted(self.served.items()):
            counts = s.udf.counts()
            rows.append((name, s.model, s.udf.export_dir, s.udf.version, s.registered_at,
                         counts.get(serving.COUNT_ROWS, 0), _total(counts, serving.COUNT_NULL),
                         _total(counts, serving.COUNT_UNSEEN), counts))
        self.spark.createDataFrame(rows, schema).createOrReplaceTempView(contract.STATUS_VIEW)

    def describe(self) -> str:
        return ", ".join(f"{n} ({s.model})" for n, s in sorted(self.served.items()))


def _total(counts: Mapping[str, int], kind: str) -> int:
    return sum(n for key, n in counts.items() if key.startswith(serving.count_key(kind, "")))


def start(spark: SparkSession, settings: ServeSqlConfig, secrets: Secrets) -> Any:
    """HiveServer2 on the session; returns the server (`.stop()`). Its password check and the
    keystore's password are handed to the JVM directly, not through any configuration."""
    jvm = spark._jvm
    assert jvm is not None  # a classic session's gateway to its JVM
    system = jvm.java.lang.System
    # HiveServer2 builds a fresh HiveConf for each login check, from the JVM's system properties.
    if settings.auth == "password":
        system.setProperty(f"{HIVE}custom.authentication.class", contract.AUTHENTICATOR_CLASS)
        jvm.tfos.sqlserver.PasswordAuthenticator.configure(settings.user, secrets.password)
    if settings.auth == "ldap":
        system.setProperty(f"{HIVE}authentication.ldap.url", settings.ldap_url)
        if settings.ldap_base_dn:
            system.setProperty(f"{HIVE}authentication.ldap.baseDN", settings.ldap_base_dn)
    if settings.tls_keystore:
        system.setProperty(f"{HIVE}keystore.password", secrets.keystore_password)
    _check_free(settings.bind, settings.port)
    try:
        server = getattr(jvm, THRIFT_SERVER).startWithSparkSession(spark._jsparkSession, False)
    finally:
        if settings.tls_keystore:  # read by the server's configuration at start; not kept where anyone can list it
            system.clearProperty(f"{HIVE}keystore.password")
    _wait_listening(settings.bind, settings.port, server)
    return server


def _check_free(bind: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET) as s:
        try:
            s.bind((bind, port))
        except OSError as e:
            raise ConfigError(f"serve_sql.port: cannot listen on {bind}:{port}: {e.strerror}") from None


def _wait_listening(bind: str, port: int, server: Any) -> None:
    host = "127.0.0.1" if bind in ("0.0.0.0", "") else "::1" if bind == "::" else bind
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.2)
    server.stop()
    raise TfosError(f"the SQL server did not accept connections on {bind}:{port} within {START_SECONDS:.0f} s; "
                    "see the errors above")


def serve(spark: SparkSession, config: Config, secrets: Secrets, reload: Callable[[], Config],
          log: Callable[[str], None] = print) -> None:
    """Register, start, then serve until SIGTERM or Ctrl-C; SIGHUP reloads the functions."""
    settings = config.serve_sql
    endpoint = Endpoint(spark, log)
    endpoint.register(config)
    views = endpoint.open_views(config)
    server = start(spark, settings, secrets)
    host = "localhost" if settings.bind in ("127.0.0.1", "::1") else settings.bind
    url = contract.jdbc_url(host, settings.port, settings.transport, settings.http_path, bool(settings.tls_keystore))
    log(f"tfos serve-sql: functions {endpoint.describe()}; views {', '.join(views + [contract.STATUS_VIEW])}")
    if settings.auth == "none":
        log(f"tfos serve-sql: warning: serve_sql.auth = 'none': every user of this host can connect to port {settings.port}")
    log(f"tfos serve-sql: authentication {settings.auth}{', TLS' if settings.tls_keystore else ''}; every query runs as "
        f"user {getpass.getuser()!r} of this process, whatever user name a client gives")
    log(f"{contract.READY} {url}")

    wake, stop, reload_asked = threading.Event(), threading.Event(), threading.Event()

    def on_stop(signum: int, _frame: Any) -> None:
        stop.set()
        wake.set()

    def on_reload(signum: int, _frame: Any) -> None:
        reload_asked.set()
        wake.set()

    previous = {s: signal.signal(s, on_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_reload)
    try:
        while not stop.is_set():
            wake.wait(settings.status_seconds)
            wake.clear()
            if reload_asked.is_set() and not stop.is_set():
                reload_asked.clear()
                _reload(endpoint, reload, settings, log)
            endpoint.refresh_status()
    finally:
        log("tfos serve-sql: stopping")
        server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _reload(endpoint: Endpoint, reload: Callable[[], Config], running: ServeSqlConfig,
            log: Callable[[str], None]) -> None:
    try:
        config = reload()
    except TfosError as e:
        log(f"tfos serve-sql: error: the config cannot be reloaded, nothing changed: {e}")
        return
    if _endpoint_settings(config.serve_sql) != _endpoint_settings(running):
        log("tfos serve-sql: warning: the server's address, transport and authentication change only on a restart")
    changed = endpoint.register(config, serving=True)
    endpoint.open_views(config)
    log(f"{contract.RELOADED} {', '.join(changed) or 'nothing'}: {endpoint.describe()}")


def _endpoint_settings(settings: ServeSqlConfig) -> tuple:
    return (settings.port, settings.bind, settings.transport, settings.http_path, settings.auth, settings.user, settings.password_env,
            settings.password_file, settings.ldap_url, settings.ldap_base_dn, settings.tls_keystore)
