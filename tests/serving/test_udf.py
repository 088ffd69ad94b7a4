"""The SQL prediction UDF against the SavedModel called in-process, and its input rules."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

import udfs
from tfos_jobs import config
from tfos_jobs.contracts.serving import COUNT_ROWS, COUNTED
from tfos_jobs.jobs.serve import predict as predict_job
from tfos_jobs.jobs.serve import sql
from tfos_jobs.errors import ConfigError, InputError, OutputExistsError
from tfos_jobs.features.spec import ListFeature
from tfos_jobs.features.text import PAD

from tests.conftest import CENSUS, ROOT, census_overrides
from tests.serving.conftest import PEOPLE



def stored(spec, name: str, value):
    """A value as the SavedModel takes it: a list padded to its max_length, a text as it is, a number as a float."""
    feature = spec.get(name)
    if isinstance(feature, ListFeature):
        return ([str(v) for v in value if v is not None and v != ""] + [PAD] * feature.max_length)[:feature.max_length]
    return value if isinstance(value, str) else float(value)


def in_process(model_dir: Path, rows: dict[str, list]) -> np.ndarray:
    import tensorflow as tf

    fn = tf.saved_model.load(str(model_dir / "saved_model")).signatures["serving_default"]
    inputs = {k: tf.constant(v, dtype=tf.float32 if isinstance(v[0], float) else tf.string) for k, v in rows.items()}
    return fn(**inputs)["probability"].numpy()


def test_udf_equals_the_savedmodel_called_in_process(spark, setup):
    cfg, model, features = setup
    p = udfs.register(spark, "predict_income", str(model))
    assert (p.spec.get("capital_gain").encoding, p.spec.get("age").encoding) == ("periodic", "piecewise_linear")
    complete = features.dropna(subset=list(p.spec.model_inputs)).limit(400)
    scored = complete.select(*p.spec.model_inputs, p().alias("p")).collect()
    rows = {name: [stored(p.spec, name, r[name]) for r in scored] for name in p.spec.model_inputs}
    expected = in_process(model, rows)
    got = np.array([r.p.probability for r in scored])
    assert len(got) == 400
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert {r.p.label for r in scored} <= {">50K", "<=50K"}
    assert all((r.p.probability >= 0.5) == (r.p.label == ">50K") for r in scored)
    from udfs.predict import Scorer

    # census's list and text: codes stand for one value a row, so it scored through serving_default
    assert p.spec.bags and Scorer(p.local_dir).codes_fn is None


def test_sql_positional_arguments_and_struct_agree(spark, setup):
    cfg, model, features = setup
    p = udfs.register(spark, "predict_income", str(model))
    features.limit(300).createOrReplaceTempView("census")
    args = ", ".join(p.spec.model_inputs)
    by_args = spark.sql(f"SELECT person_id, predict_income({args}).probability AS pr FROM census")
    by_struct = spark.sql("SELECT person_id, predict_income(struct(*)).probability AS pr FROM census")
    assertDataFrameEqual(by_args, by_struct)
    assert by_args.count() == 300


def model_calls(udf, rows) -> list[int]:
    """The rows of each call of the model, in order, as the function's counters report them (the
    counts of a call ride on its first row)."""
    counted = rows.select(udf.counting(*udf.spec.model_inputs)[COUNTED][COUNT_ROWS].alias("n")).collect()
    return [r.n for r in counted if r.n is not None]


def test_each_function_calls_the_model_on_batches_of_its_own_size(spark, setup):
    """Two functions of different batch sizes in one session: each calls the model on its own
    batch size whatever the session's Arrow batches, which registering leaves as they are, and
    both score alike."""
    cfg, model, features = setup
    arrow = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(arrow)
    spark.conf.set(arrow, "100")
    try:
        by_64 = udfs.register(spark, "predict_by_64", str(model), batch_size=64)
        by_250 = udfs.register(spark, "predict_by_250", str(model), batch_size=250)
        assert spark.conf.get(arrow) == "100"
        rows = features.limit(1000).repartition(1).cache()
        assert model_calls(by_64, rows) == [64] * 15 + [40]
        assert model_calls(by_250, rows) == [250] * 4
        assert model_calls(udfs.register(spark, "predict_by_arrow", str(model)), rows) == [100] * 10
        assertDataFrameEqual(rows.select("person_id", by_64().probability.alias("p")),
                             rows.select("person_id", by_250().probability.alias("p")))
        rows.unpersist()
    finally:
        spark.conf.set(arrow, before)


EVICTIONS = """
import gc, sys
from udfs import predict
from tfos_jobs.storage import Storage
from udfs.model_location import locate_saved_model
export_dir = Storage.local(locate_saved_model(Storage(None), sys.argv[1], setting="model_dir"))
for version in range(predict.CAPACITY + 1):  # the first model is evicted
    predict.scorer(export_dir, str(version))
settled = gc.get_freeze_count()
for version in range(predict.CAPACITY + 1, predict.CAPACITY + 4):  # three more evictions
    predict.scorer(export_dir, str(version))
print(settled, gc.get_freeze_count())
"""


def test_a_worker_keeps_its_models_out_of_the_collector_and_frees_evicted_ones(setup):
    """The cached models are frozen out of Python's garbage collector (a full collection would
    walk TensorFlow's objects again and again); a model evicted from the cache must still be
    freed, so the frozen set stays as large as the models the cache holds."""
    _, model, _ = setup
    proc = subprocess.run([sys.executable, "-c", EVICTIONS, str(model)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    settled, after = map(int, proc.stdout.split()[-2:])
    assert settled > 100_000  # TensorFlow and the models, out of every collection
    assert abs(after - settled) < 5_000  # an evicted model left frozen adds ~13,000 objects


def test_unseen_categories_go_to_oov_and_are_counted(spark, setup):
    cfg, model, features = setup
    p = udfs.register(spark, "predict_unseen", str(model))
    base = features.dropna(subset=list(p.spec.model_inputs)).where("person_id <= 60")  # no LIMIT: every row is scored
    n = base.count()
    a = base.withColumn("education", F.lit("Astronaut-school")).select("person_id", p().probability.alias("a"))
    b = base.withColumn("education", F.lit("Pirate-academy")).select("person_id", p().probability.alias("b"))
    joined = a.join(b, "person_id").collect()
    assert len(joined) == n > 40
    assert all(abs(r.a - r.b) < 1e-9 for r in joined)  # one OOV bucket: every unseen value scores alike
    assert p.counts()["unseen:education"] == 2 * n


def test_a_hashed_feature_has_no_vocabulary_and_takes_any_value(spark, setup):
    """occupation is hashed (hash_buckets): prepare wrote no vocabulary for it, the model hashes
    it the way tf.keras' Hashing layer (FarmHash64) does, and no value of it is unseen."""
    import tensorflow as tf

    from tests.serving.conftest import HASH_BUCKETS

    cfg, model, features = setup
    dataset = Path(cfg.prepare.output)
    manifest = json.loads((dataset / "_meta" / "manifest.json").read_text())
    assert "occupation" not in manifest["vocabulary_sizes"] and "education" in manifest["vocabulary_sizes"]
    assert not (dataset / "_meta" / "vocab" / "occupation.txt").exists()
    assert not (model / "saved_model" / "assets" / "vocab" / "occupation.txt").exists()
    p = udfs.register(spark, "predict_hashed", str(model))
    assert p.spec.get("occupation").hash_buckets == HASH_BUCKETS
    base = features.dropna(subset=list(p.spec.model_inputs)).where("person_id <= 60")
    n = base.count()
    # Two values never seen in training that land in the same bucket score alike; one in another bucket need not.
    buckets = tf.keras.layers.Hashing(num_bins=HASH_BUCKETS)(tf.constant([f"Atlantis-{i}" for i in range(64)]))
    by_bucket: dict[int, list[str]] = {}
    for i, b in enumerate(buckets.numpy().ravel().tolist()):
        by_bucket.setdefault(b, []).append(f"Atlantis-{i}")
    twins = next(values for values in by_bucket.values() if len(values) >= 2)
    scored = {v: {r.person_id: r.pr for r in base.withColumn("occupation", F.lit(v))
                  .select("person_id", p().probability.alias("pr")).collect()} for v in twins[:2]}
    assert len(scored[twins[0]]) == n > 40
    assert scored[twins[0]] == pytest.approx(scored[twins[1]], abs=1e-9)
    assert not any(key.endswith(":occupation") and key.startswith("unseen") for key in p.counts())


def test_nulls_take_the_spec_defaults_and_are_counted(spark, setup):
    cfg, model, features = setup
    p = udfs.register(spark, "predict_nulls", str(model))
    age_default = p.spec.get("age").default
    job_default = p.spec.get("occupation").default
    base = features.dropna(subset=list(p.spec.model_inputs)).where("person_id <= 50")
    n = base.count()
    nulls = base.withColumn("age", F.lit(None).cast("double")).withColumn("occupation", F.lit(None).cast("string"))
    filled = base.withColumn("age", F.lit(age_default)).withColumn("occupation", F.lit(job_default))
    got = nulls.select("person_id", p().probability.alias("x"))
    want = filled.select("person_id", p().probability.alias("x"))
    assertDataFrameEqual(got, want)
    counts = p.counts()
    assert counts["null:age"] == n and counts["null:occupation"] == n


def test_wrong_calls_fail_when_the_query_is_analysed_before_any_job(spark, setup):
    """A wrong column type (DataFrame form), a wrong argument count and a struct lacking features
    (SQL) each fail when the query is analysed, naming what is wrong: no job is started."""
    cfg, model, features = setup
    p = udfs.register(spark, "predict_bad", str(model))
    assert p.checked
    sc = spark.sparkContext
    sc.setJobGroup("wrong-calls", "calls the analyzer refuses")
    try:
        bad = features.limit(5).withColumn("age", F.lit("thirty"))
        with pytest.raises(AnalysisException, match=r"argument 1 \('age'\) \(numeric feature\) has type string, "
                                                    r"expected one of: byte, short, integer, long, float, double"):
            bad.select(p())
        features.limit(5).createOrReplaceTempView("few")
        with pytest.raises(AnalysisException, match="it was given 2 argument\\(s\\). predict_bad takes the features "
                                                    "as 23 arguments in this order: age, workclass"):
            spark.sql("SELECT predict_bad(age, workclass) FROM few")
        with pytest.raises(AnalysisException, match="the struct lacks feature\\(s\\) fnlwgt, education, [^;]*, days_since_last, recent_pages, queries; "
                                                    "its field 'age' \\(numeric feature\\) has type string"):
            spark.sql("SELECT predict_bad(struct(CAST(age AS STRING) AS age, workclass)) FROM few")
        assert sc.statusTracker().getJobIdsForGroup("wrong-calls") == []
        # a right call in the same group does run: the check above could have seen a job
        assert spark.sql("SELECT predict_bad(struct(*)).label FROM few").count() == 5
        assert sc.statusTracker().getJobIdsForGroup("wrong-calls") != []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


def test_the_function_reads_in_one_line(spark, setup):
    cfg, model, _ = setup
    p = udfs.register(spark, "predict_income", str(model))
    text = repr(p)
    assert text == (f"PredictionUdf(name='predict_income', model={p.export_dir!r}, version={p.version!r}, "
                    f"inputs={len(p.spec.model_inputs)}, engine='python')")
    assert len(text) < 120 + len(p.export_dir) and "\n" not in text


def test_registration_checks_the_model_before_any_query(spark, setup, tmp_path):
    cfg, model, _ = setup
    with pytest.raises(ConfigError, match="does not exist"):
        udfs.register(spark, "x", str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no SavedModel"):
        udfs.register(spark, "x", str(tmp_path / "empty"))
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-r", str(model / "saved_model"), str(broken)], check=True)
    (broken / "saved_model.pb").write_bytes(b"not a protobuf at all")
    with pytest.raises(ConfigError, match="cannot load the SavedModel in"):
        udfs.register(spark, "x", str(broken))
    no_spec = tmp_path / "no_spec"
    subprocess.run(["cp", "-r", str(model / "saved_model"), str(no_spec)], check=True)
    os.remove(no_spec / "assets" / "feature_spec.json")
    with pytest.raises(ConfigError, match="has no assets/feature_spec.json"):
        udfs.register(spark, "x", str(no_spec))
    relabelled = tmp_path / "relabelled"  # a binary model whose spec claims a regression label
    subprocess.run(["cp", "-r", str(model / "saved_model"), str(relabelled)], check=True)
    spec = json.loads((relabelled / "assets" / "feature_spec.json").read_text())
    label = next(f for f in spec["features"] if f.get("kind") == "label")
    label.update(task="regression", positive=[], negative=[])
    (relabelled / "assets" / "feature_spec.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match=r"outputs \['class_id', 'label', 'probability'\] are not those of a "
                                          r"regression model \(\['value'\]\)"):
        udfs.register(spark, "x", str(relabelled))


def test_predict_job_keeps_every_row(spark, setup):
    from tfos_jobs import api
    from tfos_jobs.contracts.prediction import PredictionSummary, summary_file
    from tfos_jobs.storage import Storage

    cfg, model, features = setup
    summary = api.predict(spark, config=cfg, log=lambda _: None)
    out = spark.read.parquet(summary.output)
    assert out.count() == PEOPLE == summary.rows
    assert {"predicted_probability", "predicted_label", "person_id"} <= set(out.columns)
    assert out.where("predicted_probability IS NULL OR predicted_label IS NULL").count() == 0
    assert summary.counts["rows"] == PEOPLE and summary.mode == "create"
    assert PredictionSummary.from_json(Storage(spark).read_text(summary_file(summary.output))) == summary
    with pytest.raises(OutputExistsError):
        api.predict(spark, config=cfg, log=lambda _: None)


def test_predict_computes_its_input_once(spark, setup, tmp_path):
    """Rows are counted by the write itself: a filter that counts every row it sees runs
    over the input exactly once (a separate count would run it, and the joins, twice)."""
    cfg, model, features = setup
    seen = spark.sparkContext.accumulator(0)

    @F.udf("boolean")
    def counted(_):
        seen.add(1)
        return True

    features.where(counted("person_id")).createOrReplaceTempView("scoring_once")
    cfg2 = config.load(CENSUS, census_overrides(tmp_path, tmp_path / "o") + [
        "sources.scoring.format=table", "sources.scoring.table=scoring_once", "predict.input=scoring",
        f"predict.model={model}", f"predict.output={tmp_path / 'pred'}"])
    summary = predict_job.run(spark, cfg2, log=lambda _: None)
    assert summary.rows == PEOPLE
    assert seen.value == PEOPLE


def test_predict_refuses_an_input_without_a_feature(spark, setup, tmp_path):
    cfg, model, features = setup
    features.drop("hours_per_week").write.parquet(str(tmp_path / "partial"))
    cfg2 = config.load(CENSUS, census_overrides(tmp_path, tmp_path / "o") + [
        "sources.scoring.format=parquet", f"sources.scoring.path={tmp_path / 'partial'}", "predict.input=scoring",
        f"predict.model={model}", f"predict.output={tmp_path / 'pred'}"])
    with pytest.raises(InputError, match="column 'hours_per_week' \\(numeric feature\\) is missing"):
        predict_job.run(spark, cfg2, log=lambda _: None)


def test_sql_statements_are_split_on_line_ending_semicolons():
    script = "-- a comment\nCREATE TEMP VIEW v AS SELECT 1 AS x;\nSELECT x,\n ';' AS s FROM v;\n"
    assert sql.statements(script) == ["CREATE TEMP VIEW v AS SELECT 1 AS x", "SELECT x,\n ';' AS s FROM v"]


@pytest.mark.slow  # a `tfos sql` process of its own: `make test-all`
def test_tfos_sql_runs_a_query_file(setup, tmp_path):
    cfg, model, _ = setup
    query = tmp_path / "q.sql"
    query.write_text("SELECT sex, count(*) AS n, round(avg(predict_income(struct(*)).probability), 3) AS p\n"
                     "FROM features GROUP BY sex ORDER BY sex;\n")
    raw = Path(cfg.sources["people"].path).parent
    sets = census_overrides(raw, tmp_path / "unused", PEOPLE) + [f"predict.model={model}"]
    cmd = [str(Path(sys.executable).parent / "tfos"), "sql", "--config", str(CENSUS), "-f", str(query),
           "--output", str(tmp_path / "result"), *[a for s in sets for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wrote 2 rows to" in proc.stdout
    import pandas as pd

    result = pd.read_parquet(tmp_path / "result").sort_values("sex")
    assert result["sex"].tolist() == ["Female", "Male"]
    assert result["n"].sum() == PEOPLE
    assert ((result["p"] > 0) & (result["p"] < 1)).all()
