"""The API's SQL at a console and for clients: a query's result shown or written, the prediction
functions served to SQL clients."""
from __future__ import annotations

from typing import Callable

from pyspark.sql import DataFrame, SparkSession

from tfos_jobs.api.data import Log, session
from tfos_jobs.config import Config


def show(spark: SparkSession, *, result: DataFrame, output: str | None = None, rows: int = 50,
         log: Log = print) -> None:
    """Print the first `rows` rows of a query whole, once Spark's stage bar is off the console, or
    write them all as Parquet to `output` and log how many: what `tfos sql` does with `sql`'s result.

    Returns
    -------
    None : the rows are printed, or at `output`.

    Raises
    ------
    TfosError : the query fails, or `output` exists or cannot be written, as one line.

    Stable. Example: ``api.show(spark, result=api.sql(spark, config=census, script="SELECT 1"), rows=5)``"""
    from tfos_jobs.jobs.serve import sql as sql_job

    sql_job.show(spark, result, output=output, rows=rows, log=log)


def serve_sql(*, config: Config, reload: Callable[[], Config] | None = None, log: Log = print) -> None:
    """Serve SQL clients (beeline, JDBC/ODBC, PyHive) as `[serve_sql]` says, the prediction functions
    registered and the sources as views, until SIGTERM or Ctrl-C; SIGHUP registers those of
    `reload()` (default: `config`). The server starts its own session, with its settings; a
    missing secret stops it before Spark starts (`tfos serve-sql`, docs/sql_server.md).

    Returns
    -------
    None : the server stopped.

    Raises
    ------
    ConfigError : a password or keystore the settings name is missing, or a setting is wrong.

    Stable. Example: ``api.serve_sql(config=config.load("conf/census.toml", ["serve_sql.port=10001"]))``"""
    from tfos_jobs.jobs.serve import sql_server

    secrets = sql_server.read_secrets(config.serve_sql)
    spark = session(config=config, conf=sql_server.session_conf(config.serve_sql, config.spark.conf))
    sql_server.serve(spark, config, secrets, reload=reload or (lambda: config), log=log)
