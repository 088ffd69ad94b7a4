"""[serve_sql]: what `tfos serve-sql` refuses before Spark starts, and where its secrets come from."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfos_jobs import config
from tfos_jobs.config.serve_sql import is_loopback
from tfos_jobs.contracts import sql_endpoint as contract
from tfos_jobs.errors import ConfigError
from tfos_jobs.jobs.serve import sql_server

from tests.conftest import CENSUS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("address, loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("sql.example.com", False),
])
def test_loopback_addresses(address, loopback):
    assert is_loopback(address) is loopback


def test_logins_are_checked_unless_loopback_opts_out():
    served = config.load(CENSUS).serve_sql
    assert (served.bind, served.auth) == ("127.0.0.1", "password")
    assert config.load(CENSUS, ["serve_sql.auth=none"]).serve_sql.auth == "none"  # loopback only
    with pytest.raises(ConfigError, match="serve_sql.bind: '0.0.0.0' is reachable from other hosts; it needs "
                                          "serve_sql.auth"):
        config.load(CENSUS, ["serve_sql.bind=0.0.0.0", "serve_sql.auth=none"])
    cfg = config.load(CENSUS, ["serve_sql.bind=0.0.0.0"])
    assert cfg.serve_sql.auth == "password"
    with pytest.raises(ConfigError, match="serve_sql.ldap_url: auth = 'ldap' needs"):
        config.load(CENSUS, ["serve_sql.bind=0.0.0.0", "serve_sql.auth=ldap"])


def test_a_password_in_the_config_is_not_a_setting():
    with pytest.raises(ConfigError, match="serve_sql.password: unknown key; allowed keys: .*password_env"):
        config.load(CENSUS, ["serve_sql.auth=password", "serve_sql.password=hunter2"])


def test_functions_default_to_predict_and_names_are_checked():
    cfg = config.load(CENSUS)
    assert sql_server.functions(cfg) == {cfg.predict.name: cfg.predict.model}
    cfg = config.load(CENSUS, ["serve_sql.functions.predict_income=models:/census@champion",
                               "serve_sql.functions.predict_old=/models/census-2025"])
    assert sql_server.functions(cfg) == {"predict_income": "models:/census@champion",
                                         "predict_old": "/models/census-2025"}
    with pytest.raises(ConfigError, match="serve_sql.functions: 'bad-name' is not a valid SQL function name"):
        config.load(CENSUS, ["serve_sql.functions.bad-name=/models/x"])


def test_the_password_comes_from_the_environment_or_a_private_file(tmp_path):
    cfg = config.load(CENSUS, ["serve_sql.auth=password", "serve_sql.password_env=SQL_PW"]).serve_sql
    with pytest.raises(ConfigError, match="serve_sql.password_env: the environment variable SQL_PW is not set"):
        sql_server.read_secrets(cfg, {})
    secrets = sql_server.read_secrets(cfg, {"SQL_PW": "s3cret"})
    assert secrets.password == "s3cret" and "s3cret" not in repr(secrets)

    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    os.chmod(secret, 0o644)
    in_file = config.load(CENSUS, ["serve_sql.auth=password", f"serve_sql.password_file={secret}"]).serve_sql
    with pytest.raises(ConfigError, match=r"can be read by other users \(mode 0644\); make it private: chmod 600"):
        sql_server.read_secrets(in_file, {})
    os.chmod(secret, 0o600)
    assert sql_server.read_secrets(in_file, {}).password == "from-a-file"


def test_the_session_settings_hold_no_secret():
    cfg = config.load(CENSUS, ["serve_sql.auth=password", "serve_sql.transport=http", "serve_sql.port=10555"])
    conf = sql_server.session_conf(cfg.serve_sql)
    assert conf["spark.sql.hive.thriftServer.singleSession"] == "true"
    assert conf["spark.hadoop.hive.server2.authentication"] == "CUSTOM"
    assert conf["spark.hadoop.hive.server2.transport.mode"] == "http"
    assert conf["spark.hadoop.hive.server2.thrift.http.port"] == "10555"
    assert not [k for k in conf if "password" in k]
    assert conf["spark.driver.extraClassPath"].endswith("tfos-tfrecord.jar")  # the password check's class
    given = sql_server.session_conf(cfg.serve_sql, {"spark.driver.extraClassPath": "/opt/extra.jar"})
    assert given["spark.driver.extraClassPath"].startswith("/opt/extra.jar" + os.pathsep)


def test_jdbc_urls():
    assert contract.jdbc_url("localhost", 10000, "binary", "cliservice", False) == "jdbc:hive2://localhost:10000/default"
    assert contract.jdbc_url("db.example.com", 443, "http", "/cliservice", True) == (
        "jdbc:hive2://db.example.com:443/default;transportMode=http;httpPath=cliservice;ssl=true")


def test_serve_sql_refuses_an_open_address_without_a_password_before_spark_starts():
    proc = subprocess.run([sys.executable, "-m", "tfos_jobs.cli", "serve-sql", "--config", str(CENSUS),
                           "--bind", "0.0.0.0", "--set", "serve_sql.auth=none"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert "serve_sql.bind: '0.0.0.0' is reachable from other hosts" in proc.stderr
    env = {k: v for k, v in os.environ.items() if k != "TFOS_SQL_PASSWORD"}
    proc = subprocess.run([sys.executable, "-m", "tfos_jobs.cli", "serve-sql", "--config", str(CENSUS),
                           "--bind", "0.0.0.0"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 2
    assert "serve_sql.password_env: the environment variable TFOS_SQL_PASSWORD is not set" in proc.stderr
    assert "log4j" not in proc.stdout + proc.stderr  # refused before a Spark JVM started
