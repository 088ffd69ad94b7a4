"""`tfos predict` from the warehouse sources into a partitioned Hive table (create, append,
create again refused) and into a PostgreSQL table, counted where the rows landed."""
from __future__ import annotations

import pytest

from tfos_jobs import config
from tfos_jobs.jobs.train.driver import job as train_job

from tests.conftest import CENSUS
from tests.warehouse.conftest import PASSWORD_ENV, PEOPLE, WAREHOUSE, pg_sets, tfos

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(spark, warehouse, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("wh-model") / "model"
    cfg = config.load(CENSUS, [f"train.dataset={warehouse['dataset']}", f"train.model_dir={model_dir}",
                               "train.strategy=local", "train.epochs=1", "train.batch_size=256",
                               "train.tensorboard=false"])
    train_job.run(spark, cfg, log=lambda _: None)
    return model_dir


def test_predictions_into_a_partitioned_hive_table_then_appended(pg, warehouse, model):
    sets = [*pg_sets(pg, warehouse), f"predict.model={model}", "predict.output_table=census.scored",
            'predict.partition_by=["sex"]']
    env = {PASSWORD_ENV: pg.password}
    first = tfos("predict", "--config", str(WAREHOUSE), sets=sets, env=env)
    assert f"predicted {PEOPLE:,} rows into census.scored (create)" in first.stdout
    parts = sorted(p.name for p in (warehouse["hive"] / "census.db" / "scored").glob("sex=*"))
    assert parts == ["sex=Female", "sex=Male"]
    again = tfos("predict", "--config", str(WAREHOUSE), sets=sets, env=env, expect=2)
    assert "table 'census.scored' exists; pass --overwrite" in again.stderr
    appended = tfos("predict", "--config", str(WAREHOUSE), sets=[*sets, "predict.mode=append"], env=env)
    # the product counts the table before and after: it grew by exactly the rows scored
    assert f"predicted {PEOPLE:,} rows into census.scored (append)" in appended.stdout


def test_predictions_written_back_to_postgres(pg, warehouse, model):
    sets = [*pg_sets(pg, warehouse), f"predict.model={model}", "predict.output_source=scores",
            "sources.scores.format=jdbc", f"sources.scores.password_env={PASSWORD_ENV}",
            f"sources.scores.options.url={pg.url}", "sources.scores.options.dbtable=scores",
            "sources.scores.options.user=tfos"]
    proc = tfos("predict", "--config", str(WAREHOUSE), sets=sets, env={PASSWORD_ENV: pg.password})
    assert f"predicted {PEOPLE:,} rows into scores at {pg.url} (create)" in proc.stdout
    assert pg.sql("SELECT count(*), count(DISTINCT person_id) FROM scores").strip() == f"{PEOPLE}|{PEOPLE}"
    assert float(pg.sql("SELECT avg(predicted_probability) FROM scores").strip()) > 0
    tfos("predict", "--config", str(WAREHOUSE), sets=[*sets, "predict.mode=overwrite"], env={PASSWORD_ENV: pg.password})
    assert pg.sql("SELECT count(*) FROM scores").strip() == str(PEOPLE)
