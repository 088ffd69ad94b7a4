"""Sensor readings of many machines in one PostgreSQL table, prepared into windows with
`conf/sensors.toml` by `tfos prepare`: the same windows and split as from a Parquet file."""
from __future__ import annotations

import io
import json

import pytest

from tfos_jobs import config
from tfos_jobs.databases.postgres import JDBC_PACKAGE
from tfos_jobs.jobs import prepare

from tests.spark.test_own_sensor_data import MACHINES, SENSORS, STEPS, machine_names, readings
from tests.warehouse.conftest import PASSWORD_ENV, jdbc_source, quiet, tfos

PG_READINGS = "CREATE TABLE readings (machine text, recorded_at timestamp, signal double precision);\n"


@pytest.mark.slow  # a PostgreSQL table of many machines prepared twice, 1.5 minutes: `make test-all`
def test_a_jdbc_table_of_many_machines_prepares_like_a_file(pg, spark, tmp_path):
    frame = readings(machine_names(spark, MACHINES), set())[["machine", "recorded_at", "signal"]]
    csv = io.StringIO()
    frame.to_csv(csv, index=False, date_format="%Y-%m-%d %H:%M:%S")
    pg.sql(PG_READINGS + f"COPY readings FROM STDIN WITH (FORMAT csv, HEADER true);\n{csv.getvalue()}\\.\n")
    frame.to_parquet(tmp_path / "readings.parquet", coerce_timestamps="us")
    files = prepare.run(spark, config.load(SENSORS, [f"sources.readings.path={tmp_path / 'readings.parquet'}",
                                                     f"prepare.output={tmp_path / 'files'}"]), log=lambda _: None).to_dict()
    sets = [*jdbc_source("readings", pg.url, table="readings"), f"prepare.output={tmp_path / 'jdbc'}",
            f'spark.packages=["{JDBC_PACKAGE}"]', *quiet()]
    tfos("prepare", "--config", str(SENSORS), sets=sets, env={PASSWORD_ENV: pg.password})
    jdbc = json.loads((tmp_path / "jdbc" / "_meta" / "manifest.json").read_text())
    assert jdbc["splits"]["eval"]["assets"] == 1 and jdbc["windows"]["kept"] == MACHINES * 23
    assert jdbc["sources"]["readings"]["files"] is None
    assert jdbc["rows"] == files["rows"] == {"read": MACHINES * STEPS, "rejected": 0}
    for split in ("train", "eval"):  # the same records, byte for byte
        assert [(tmp_path / "jdbc" / split / f["path"]).read_bytes() for f in jdbc["splits"][split]["files"]] == \
               [(tmp_path / "files" / split / f["path"]).read_bytes() for f in files["splits"][split]["files"]]
