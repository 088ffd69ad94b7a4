"""P13: the aggregate query an analyst's SQL client sends, through JDBC to the HiveServer2 that
`tfos serve-sql` starts (here on the bench's own session, with a password), against the same
query run in-process the way `tfos sql` runs it: what the endpoint costs a query."""
from __future__ import annotations

import dataclasses
import secrets
import socket
import time
from typing import Callable

from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample
from tfos_jobs.config.serve_sql import ServeSqlConfig
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts import sql_endpoint as endpoint

JDBC_DRIVER = "org.apache.hive.jdbc.HiveDriver"  # Hive's JDBC driver, shipped with pyspark (beeline's)


def endpoint_config() -> ServeSqlConfig:
    """The server's settings (a free loopback port, password check on); they must be in the
    session before it starts: `sql_server.session_conf`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return ServeSqlConfig(port=port, auth="password")


def through_jdbc(bench: Bench, served: ServeSqlConfig) -> None:
    from tfos_jobs.jobs.serve import sql, sql_server

    import udfs

    spark, pr = bench.spark, bench.big.predict
    udf = udfs.register(spark, pr.name, pr.model, batch_size=pr.batch_size)
    spec = udf.spec
    sql.open_views(spark, dataclasses.replace(bench.big, features=spec), spec)
    rows = spark.table(sql.FEATURES_VIEW).count()
    value = f"{pr.name}({', '.join(spec.model_inputs)})"
    if contract.udf_returns_struct(spec.label.task):
        value += f".{contract.PROBABILITY}"
    group = spec.categorical[0].name
    statement = f"SELECT {group}, avg({value}) AS p FROM {sql.FEATURES_VIEW} GROUP BY {group}"
    password = secrets.token_urlsafe(24)
    server = sql_server.start(spark, served, sql_server.Secrets(password=password))
    jvm = spark._jvm
    jvm.java.lang.Class.forName(JDBC_DRIVER)
    url = endpoint.jdbc_url("127.0.0.1", served.port, served.transport, served.http_path, False)
    bench.run.sizes["P13 query"] = (f"avg of the UDF over {rows:,} rows (16x people joined with regions and "
                                    f"events), grouped by {group}")

    def jdbc() -> int:
        conn = jvm.java.sql.DriverManager.getConnection(url, "bench", password)
        try:
            result = conn.createStatement().executeQuery(statement)
            n = 0
            while result.next():
                n += 1
            return n
        finally:
            conn.close()

    def in_process() -> int:
        return len(spark.sql(statement).collect())

    def timed(run: Callable[[], int]) -> Callable[[], Sample]:
        def once() -> Sample:
            started = time.perf_counter()
            groups = run()
            wall = time.perf_counter() - started
            if groups < 2:
                raise RuntimeError(f"P13's query gave {groups} groups")
            return {"rows_per_sec": rows / wall}
        return once

    try:
        if jdbc() != in_process():
            raise RuntimeError("P13: the query gave different groups through JDBC and in-process")
        out = bench.repeat("SQL endpoint", {"through JDBC": timed(jdbc), "tfos sql": timed(in_process)})
    finally:
        server.stop()
    bench.run.results.append(Result(
        "P13", "the same aggregate SQL query (the UDF on every row, grouped) through JDBC to tfos serve-sql's "
               "endpoint vs in-process as tfos sql runs it (rows scored per second)",
        Figure("through JDBC", "rows/s", out["through JDBC"]["rows_per_sec"]),
        Figure("tfos sql", "rows/s", out["tfos sql"]["rows_per_sec"]), 0.8, ">="))
