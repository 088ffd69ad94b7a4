"""One `tfos sources` run over good and bad sources: a source that cannot be read is named with
its host or table, within a bounded time, no password is ever printed, and the good ones
are still read (their tasks, pruned partitions and pushed-down filters are in test_reads)."""
from __future__ import annotations

import json

from tests.warehouse.conftest import WAREHOUSE, WRONG, tfos


def test_a_refused_connection_names_source_and_host(bad):
    _, got, closed = bad
    assert got["refused"]["error"].startswith("source 'refused' (jdbc people at jdbc:postgresql://127.0.0.1:")
    assert f"cannot connect to 127.0.0.1:{closed}" in got["refused"]["error"]


def test_a_host_that_does_not_answer_fails_within_the_connect_timeout(bad):
    _, got, _ = bad
    assert got["silent"]["error"].startswith("source 'silent' (jdbc people at jdbc:postgresql://127.0.0.1:")
    assert "within 2 s (sources.silent.connect_timeout)" in got["silent"]["error"]


def test_a_wrong_password_is_refused_without_printing_it(bad, pg):
    proc, got, _ = bad
    assert "source 'wrong_password'" in got["wrong_password"]["error"]
    assert 'password authentication failed for user "tfos"' in got["wrong_password"]["error"]
    everything = proc.stdout + proc.stderr
    assert WRONG not in everything and pg.password not in everything


def test_a_missing_database_table_is_named(bad):
    _, got, _ = bad
    assert got["missing_table"]["error"].startswith("source 'missing_table' (jdbc no_such_table at jdbc:postgresql://")
    assert 'relation "no_such_table" does not exist' in got["missing_table"]["error"]


def test_a_missing_hive_table_is_named(bad):
    proc, got, _ = bad
    assert got["missing_hive"]["error"].startswith("source 'missing_hive' (table census.no_such_table):")
    assert "TABLE_OR_VIEW_NOT_FOUND" in got["missing_hive"]["error"]
    assert "missing_hive: ERROR" in proc.stderr and got["people"]["error"] is None


def test_a_database_column_of_the_wrong_type_is_named(bad):
    """The spec check prepare runs (the joined sources against the feature spec), while the
    sources prepare does not join are reported on their own."""
    proc, got, _ = bad
    assert got["typed"]["error"] is None and got["typed"]["columns"]["age"] == "string"
    error = json.loads(proc.stdout)["spec_error"]
    assert "column 'age' (numeric feature) has type string" in error and "in source 'typed'" in error


def test_a_password_in_the_config_is_refused_before_spark_starts(tmp_path):
    proc = tfos("config", "--config", str(WAREHOUSE), sets=["sources.people.options.password=hunter2"], expect=2)
    assert "sources.people.options.password: a password is never written in the config" in proc.stderr
    assert "hunter2" not in proc.stdout + proc.stderr
