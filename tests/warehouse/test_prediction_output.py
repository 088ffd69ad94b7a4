"""predict.mode on files and catalog tables: create refuses an existing output, overwrite
replaces it, overwrite_partitions replaces only the partitions written, append adds the rows;
each write is counted where it landed."""
from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs.serving.outputs import CatalogTable, Files, Tally
from tfos_jobs.errors import OutputExistsError, TfosError

SCHEMA = "person_id BIGINT, region STRING, predicted_probability DOUBLE"


def rows(spark, ids, region):
    return spark.createDataFrame([(i, region, i / 100) for i in ids], SCHEMA)


def write(out, df, mode):
    return out.write(Tally(df, out.partition_by), mode)


@pytest.fixture(params=["files", "table"])
def target(request, spark, tmp_path):
    if request.param == "files":
        yield lambda: Files(spark, str(tmp_path / "scored"), ("region",))
        return
    name = f"scored_{tmp_path.name[-12:].replace('-', '_')}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    yield lambda: CatalogTable(spark, name, ("region",))
    spark.sql(f"DROP TABLE IF EXISTS {name}")


def read(spark, out):
    return spark.read.parquet(out.target) if isinstance(out, Files) else spark.table(out.target)


def test_modes(spark, target):
    europe, asia = rows(spark, range(0, 10), "Europe"), rows(spark, range(10, 15), "Asia")
    out = target()
    assert write(out, europe.unionByName(asia), "create") == 15
    with pytest.raises(OutputExistsError, match="exists; pass --overwrite"):
        write(target(), europe, "create")
    # a new run for Europe only: Asia's partition stays
    new_europe = rows(spark, range(100, 103), "Europe")
    assert write(target(), new_europe, "overwrite_partitions") == 3
    assertDataFrameEqual(read(spark, out).select(*europe.columns), new_europe.unionByName(asia))
    assert write(target(), asia, "append") == 5
    assert read(spark, out).where("region = 'Asia'").count() == 10
    assert write(target(), europe, "overwrite") == 10
    assertDataFrameEqual(read(spark, out).select(*europe.columns), europe)


def test_appending_other_columns_to_a_table_is_refused(spark, tmp_path):
    name = "scored_layout"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    try:
        write(CatalogTable(spark, name, ("region",)), rows(spark, range(3), "Asia"), "create")
        other = rows(spark, range(3), "Asia").withColumnRenamed("predicted_probability", "score")
        with pytest.raises(TfosError, match="has columns person_id, predicted_probability, region; this run writes"):
            write(CatalogTable(spark, name, ("region",)), other, "append")
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")
