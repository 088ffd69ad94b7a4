"""A MariaDB server (Debian's package) read through MySQL Connector/J: parallel ranges and a
refused password, as for PostgreSQL."""
from __future__ import annotations

import os

import pytest

from tfos_jobs.databases import mariadb

from tests.warehouse.conftest import PEOPLE, WAREHOUSE, create_table_sql, people_frame, people_types, quiet, report, tfos

MYSQL_TYPES = {"BIGINT": "BIGINT", "INT": "INT", "STRING": "TEXT", "DOUBLE": "DOUBLE"}


@pytest.fixture(scope="module")
def maria(warehouse):
    if not mariadb.available():
        if os.environ.get("CI"):
            pytest.fail("mariadbd is not installed: make test installs Debian's mariadb-server when run as root")
        pytest.skip("mariadbd is not installed (Debian's mariadb-server)")
    frame = people_frame(warehouse["raw"])
    values = ",\n".join("(" + ", ".join("NULL" if v is None or v != v else repr(v) if isinstance(v, str) else str(v)
                                        for v in row) + ")" for row in frame.itertuples(index=False))
    with mariadb.MariaDB(database="census") as server:
        server.sql(create_table_sql("people", frame, people_types(MYSQL_TYPES))
                   + f"INSERT INTO people VALUES\n{values};\n")
        yield server


def test_mariadb_partitioned_read_and_a_refused_password(maria, warehouse):
    sets = ["sources.people.format=jdbc", f"sources.people.options.url={maria.url}",
            "sources.people.password_env=MARIADB_PASSWORD", f"sources.people.options.upperBound={PEOPLE}",
            "sources.wrong.format=jdbc", f"sources.wrong.options.url={maria.url}", "sources.wrong.options.dbtable=people",
            "sources.wrong.options.user=tfos", "sources.wrong.password_env=WRONG_PASSWORD",
            f"spark.packages=[\"{mariadb.JDBC_PACKAGE}\"]", f"spark.warehouse={warehouse['hive']}", *quiet()]
    proc = tfos("sources", "--config", str(WAREHOUSE), "--json", "--only", "people", "--only", "wrong",
                sets=sets, expect=2, env={"MARIADB_PASSWORD": maria.password, "WRONG_PASSWORD": "nope-0x51"})
    got = report(proc)
    people = got["people"]
    assert people["read_tasks"] == 4 and people["rows"] == PEOPLE
    assert people["columns"]["age"] == "integer" and people["columns"]["person_id"] == "long"
    assert got["wrong"]["error"].startswith(f"source 'wrong' (jdbc people at {maria.url})")
    assert "Access denied for user 'tfos'" in got["wrong"]["error"]
    assert "nope-0x51" not in proc.stdout + proc.stderr and maria.password not in proc.stdout + proc.stderr
