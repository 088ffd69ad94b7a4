"""Warehouse settings, checked before Spark starts: `extends`, passwords kept out of configs,
JDBC URLs, prediction outputs."""
import pytest

from tfos_jobs import config
from tfos_jobs.config import SourceConfig
from tfos_jobs.data import jdbc
from tfos_jobs.errors import ConfigError

from tests.conftest import CENSUS, ROOT

WAREHOUSE = ROOT / "conf" / "census_warehouse.toml"


def test_extends_merges_tables_and_replaces_sources_whole():
    base, cfg = config.load(CENSUS), config.load(WAREHOUSE)
    assert cfg.features == base.features and cfg.prepare.lookups == base.prepare.lookups
    assert cfg.prepare.output == "demo-output/warehouse-dataset" and cfg.prepare.main == "people"
    people = cfg.sources["people"]
    assert people.format == "jdbc" and people.path is None  # not the base's Parquet path
    assert cfg.spark.hive and cfg.spark.packages == ("org.postgresql:postgresql:42.7.14",)


def test_extends_itself_is_named(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    with pytest.raises(ConfigError, match="extends itself"):
        config.load(tmp_path / "a.toml")


@pytest.mark.parametrize("override", [
    "sources.people.options.password=hunter2",
    "sources.people.options.PASSWORD=hunter2",
    "sources.people.options.url=jdbc:postgresql://db:5432/census?user=tfos&password=hunter2",
    "sources.people.options.url=jdbc:mysql://tfos:hunter2@db:3306/census",
])
def test_a_password_in_the_config_is_refused_without_repeating_it(override):
    with pytest.raises(ConfigError) as err:
        config.load(WAREHOUSE, [override])
    assert "password" in str(err.value) and "hunter2" not in str(err.value)


def test_jdbc_settings_are_checked():
    with pytest.raises(ConfigError) as err:
        config.load(WAREHOUSE, ["sources.people.options.url=postgresql://db/census", "sources.people.connect_timeout=0",
                                "sources.regions.password_env=X"])
    msg = str(err.value)
    assert "sources.people.options.url: a JDBC URL starts with 'jdbc:'" in msg
    assert "sources.people.connect_timeout: must be >= 1" in msg
    assert "sources.regions: password_env and password_file apply to format = 'jdbc' only" in msg


def test_prediction_outputs_are_checked():
    with pytest.raises(ConfigError) as err:
        config.load(WAREHOUSE, ["predict.output_source=regions", "predict.mode=overwrite_partitions"])
    msg = str(err.value)
    assert "predict.output_source: 'regions' is not a jdbc source with options.dbtable" in msg
    assert "predict.mode: 'overwrite_partitions' needs predict.partition_by" in msg
    with pytest.raises(ConfigError, match="not both"):
        config.load(WAREHOUSE, ["predict.output_source=people", "predict.output_table=db.t"])


@pytest.mark.parametrize("url, where", [
    ("jdbc:postgresql://db.example:6432/census", ("db.example", 6432)),
    ("jdbc:postgresql://db.example/census", ("db.example", 5432)),
    ("jdbc:mysql://10.0.0.7/census?useSSL=true", ("10.0.0.7", 3306)),
    ("jdbc:sqlserver://[::1]:1444;databaseName=x", ("::1", 1444)),
    ("jdbc:h2:mem:test", None),
])
def test_jdbc_endpoint(url, where):
    assert jdbc.endpoint(url) == where


def test_password_comes_from_the_named_variable_or_file(tmp_path, monkeypatch):
    src = SourceConfig(format="jdbc", options={"url": "jdbc:postgresql://db/x", "dbtable": "t"}, password_env="PW_X")
    with pytest.raises(ConfigError, match="environment variable 'PW_X' is not set"):
        jdbc.options("people", src)
    monkeypatch.setenv("PW_X", "s3cret")
    opts = jdbc.options("people", src)
    assert opts["password"] == "s3cret" and opts["driver"] == "org.postgresql.Driver"
    (tmp_path / "pw").write_text("from-file\n")
    src = SourceConfig(format="jdbc", options=src.options, password_file=str(tmp_path / "pw"))
    assert jdbc.options("people", src)["password"] == "from-file"
    assert jdbc.redact("login s3cret refused", "s3cret") == f"login {jdbc.REDACTED} refused"
