"""JDBC sources: credentials from the environment or a file, a bounded reachability check, and errors that name the
source and host but never the password.

Spark's JDBC reader would otherwise wait for the operating system's TCP timeout on a host that drops packets (minutes)
and report a driver stack trace; the check below answers within `connect_timeout` seconds before any job starts."""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from tfos_jobs.config import SourceConfig
from tfos_jobs.errors import ConfigError, InputError

# jdbc:<subprotocol>://host[:port][/...]: the default port per subprotocol
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "sqlserver": 1433, "oracle": 1521}
_URL = re.compile(r"^jdbc:(?P<kind>[a-z0-9]+)(?::[a-z]+)*://(?P<host>\[[^\]]+\]|[^:/?;,]+)(?::(?P<port>\d+))?")
# Driver classes Spark is told about: a driver jar fetched with spark.jars.packages is not on the
# JVM's system class path, where java.sql.DriverManager alone would look ("No suitable driver").
DRIVER_CLASSES = {"postgresql": "org.postgresql.Driver", "mysql": "com.mysql.cj.jdbc.Driver",
                  "mariadb": "org.mariadb.jdbc.Driver", "sqlserver": "com.microsoft.sqlserver.jdbc.SQLServerDriver",
                  "oracle": "oracle.jdbc.OracleDriver"}
REDACTED = "*****"


def endpoint(url: str) -> tuple[str, int] | None:
    """(host, port) of a JDBC URL, or None for a form this cannot read (then no check is made)."""
    m = _URL.match(url)
    if not m:
        return None
    port = int(m["port"]) if m["port"] else DEFAULT_PORTS.get(m["kind"])
    return (m["host"].strip("[]"), port) if port else None


def password(name: str, src: SourceConfig) -> str | None:
    """The password the config points at; an unset variable or unreadable file is named, the value never."""
    if src.password_env:
        value = os.environ.get(src.password_env)
        if value is None:
            raise ConfigError(f"sources.{name}.password_env: environment variable {src.password_env!r} is not set")
        return value
    if src.password_file:
        try:
            return Path(src.password_file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as e:
            raise ConfigError(f"sources.{name}.password_file: cannot read {src.password_file!r}: {e.strerror}") from None
    return None


def check_reachable(name: str, src: SourceConfig) -> None:
    """Open and close one TCP connection to the database server, within `connect_timeout` seconds."""
    where = endpoint(src.options["url"])
    if where is None:
        return
    host, port = where
    try:
        with socket.create_connection((host, port), timeout=src.connect_timeout):
            pass
    except socket.timeout:
        raise InputError(f"source {name!r} (jdbc {src.location()}): no answer from {host}:{port} within "
                         f"{src.connect_timeout} s (sources.{name}.connect_timeout)") from None
    except OSError as e:
        raise InputError(f"source {name!r} (jdbc {src.location()}): cannot connect to {host}:{port}: "
                         f"{e.strerror or e}") from None


def options(name: str, src: SourceConfig) -> dict[str, str]:
    """The reader/writer options with the password filled in from where the config points."""
    opts = dict(src.options)
    kind = src.options["url"].split(":")[1] if src.options["url"].count(":") > 1 else ""
    if "driver" not in opts and kind in DRIVER_CLASSES:
        opts["driver"] = DRIVER_CLASSES[kind]
    secret = password(name, src)
    if secret is not None:
        opts["password"] = secret
    return opts


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, REDACTED) if secret else text


def driver_error(e: Exception) -> str:
    """The database's own message from a JDBC failure: the innermost Java cause's first line.
    Spark wraps it (from 4.1 in FAILED_JDBC.CONNECTION, whose text says only that it could not
    connect), so the cause chain is followed rather than the wrapper's text."""
    throwable = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
    try:
        while throwable is not None and throwable.getCause() is not None:
            throwable = throwable.getCause()
        message = throwable.getMessage() if throwable is not None else None
    except Exception:  # a Py4J object that cannot be asked any more
        message = None
    text = str(message or e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    causes = [ln.split("Caused by: ", 1)[1] for ln in lines if ln.startswith("Caused by: ")]
    first = causes[-1] if causes else next((ln for ln in lines if not ln.startswith("at ")), text)
    return re.sub(r"^(?:[a-z0-9_]+\.)+[A-Za-z0-9_$]+(?:Exception|Error): ", "", first)
