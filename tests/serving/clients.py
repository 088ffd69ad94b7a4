"""SQL clients of `tfos serve-sql`, shared by the tests that start one (here and tests/k8s/)."""
from __future__ import annotations


def dbapi(port: int, statement: str, password: str, host: str = "127.0.0.1") -> list[tuple]:
    """The rows PyHive (DB-API over HiveServer2's binary protocol, password login) gets."""
    from pyhive import hive

    conn = hive.connect(host=host, port=port, username="analyst", password=password, auth="CUSTOM")
    try:
        cursor = conn.cursor()
        cursor.execute(statement)
        return cursor.fetchall()
    finally:
        conn.close()
