"""What `tfos serve-sql` offers its clients and its operators: the JDBC URL, the line it prints
when it is ready, the status view and its columns, the password check's JVM class.

The server (`jobs/serve/sql_server.py`), the benchmark and the tests read these."""
from __future__ import annotations

# The JVM class HiveServer2 asks for each password (jvm/sqlserver, in the package's jar).
AUTHENTICATOR_CLASS = "tfos.sqlserver.PasswordAuthenticator"

# Printed, with the URL after it, once clients can connect.
READY = "tfos serve-sql: ready at"
# Printed after a reload (SIGHUP) re-registered the functions, with their names and models.
RELOADED = "tfos serve-sql: reloaded"

# One row per registered function: what it serves and its counters since it was registered.
STATUS_VIEW = "tfos_functions"
FUNCTION, MODEL, SERVED, VERSION, REGISTERED_AT = "function", "model", "served", "version", "registered_at"
ROWS, NULLS, UNSEEN, COUNTS = "rows", "nulls_filled", "unseen_categories", "counts"
STATUS_COLUMNS = (FUNCTION, MODEL, SERVED, VERSION, REGISTERED_AT, ROWS, NULLS, UNSEEN, COUNTS)


def jdbc_url(host: str, port: int, transport: str, http_path: str, tls: bool, database: str = "default") -> str:
    """The URL beeline and JDBC drivers take (Hive's `jdbc:hive2://` form)."""
    url = f"jdbc:hive2://{host}:{port}/{database}"
    if transport == "http":
        url += f";transportMode=http;httpPath={http_path.strip('/')}"
    if tls:
        url += ";ssl=true"
    return url
