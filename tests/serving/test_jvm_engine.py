"""The prediction function scored inside the executor JVM by TensorFlow Java (`predict.engine = "jvm"`): the Python
UDF's results and counters on every row, planned as a batch-evaluation operator with no Python in the plan."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from tfos_jobs.contracts import serving as contract
from tfos_jobs.errors import ConfigError
from udfs import jvm_engine, register


def _explained(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_jvm_scores_as_the_python_udf_on_every_row(spark, setup):
    cfg, model, features = setup
    python = register(spark, "census_py", str(model), batch_size=700)
    jvm = register(spark, "census_jvm", str(model), batch_size=700, engine="jvm")
    assert (python.engine, jvm.engine) == ("python", "jvm")
    args = [F.col(n) for n in jvm.spec.model_inputs]
    both = features.select(F.monotonically_increasing_id().alias("row"), python(*args).alias("p"),
                           jvm(*args).alias("j")).cache()
    rows = both.count()
    assert rows == features.count() > 1000
    differs = both.where(F.abs(F.col("p.probability") - F.col("j.probability")) > jvm_engine.TOLERANCE)
    assert differs.count() == 0, differs.limit(3).collect()
    assert both.where(F.col("p.label") != F.col("j.label")).count() == 0
    assert both.where(F.col("j.label").isNull()).count() == 0
    assertDataFrameEqual(both.select("row", "j.label"), both.select("row", "p.label"))
    assert python.counts() == jvm.counts()
    assert jvm.counts()[contract.COUNT_ROWS] == rows
    both.unpersist()


def test_a_model_taking_codes_scores_as_the_python_udf_on_every_row(spark, codes_setup):
    """A wide & deep model of one value a row is fed its categories as codes; rows held beside the results (a column
    kept) or read as they come (an aggregate of the results) score as the Python UDF, unseen, over-long and missing
    categories counted alike."""
    from tfos_jobs.contracts.serving import CODES_SIGNATURE
    from tfos_jobs.model.export import load_signature

    cfg, model, features = codes_setup
    python = register(spark, "codes_py", str(model), batch_size=500)
    jvm = register(spark, "codes_jvm", str(model), batch_size=500, engine="jvm")
    assert load_signature(python.local_dir, CODES_SIGNATURE) is not None
    texts = {f.name for f in features.schema.fields if f.dataType.typeName() == "string"}
    categorical = next(f.name for f in jvm.spec.with_vocabulary if f.name in texts)
    n = F.monotonically_increasing_id()
    odd = features.withColumn("row", n).withColumn(categorical, F.when(
        F.col("row") % 7 == 0, F.lit("a value never seen in training, longer than any category's limit " * 4)).when(
        F.col("row") % 11 == 0, F.lit(None)).when(F.col("row") % 13 == 0, F.lit("unseen")).otherwise(
        F.col(categorical))).cache()
    args = [F.col(c) for c in jvm.spec.model_inputs]
    both = odd.select("row", python(*args).alias("p"), jvm(*args).alias("j")).cache()
    rows = both.count()
    assert rows == features.count() > 1000
    differs = both.where(F.abs(F.col("p.probability") - F.col("j.probability")) > jvm_engine.TOLERANCE)
    assert differs.count() == 0, differs.limit(3).collect()
    assertDataFrameEqual(both.select("row", "j.label"), both.select("row", "p.label"))
    assert python.counts() == jvm.counts()
    counts = jvm.counts()
    assert counts[contract.count_key(contract.COUNT_UNSEEN, categorical)] >= rows // 13, counts
    assert counts[contract.count_key(contract.COUNT_NULL, categorical)] >= rows // 11 * 0.9, counts
    # read as they come, nothing held: the same sum as the Python UDF's
    jvm_total = odd.select(jvm(*args).alias("s")).agg(F.sum("s.probability").alias("t")).first().t
    assert jvm_total == pytest.approx(both.agg(F.sum("p.probability").alias("t")).first().t, abs=rows * 1e-5)
    both.unpersist()
    odd.unpersist()


def test_arguments_computed_per_row_score_as_the_columns_do(spark, setup):
    """Columns are read where they lie in the input row; expressions are computed into a row of arguments first:
    both give the same results."""
    cfg, model, features = setup
    jvm = register(spark, "census_args", str(model), engine="jvm")
    names = jvm.spec.model_inputs
    text = next(f.name for f in features.schema.fields if f.name in names and f.dataType.typeName() == "string")
    rows = features.select(F.monotonically_increasing_id().alias("row"), *names).cache()
    direct = rows.select("row", jvm(*[F.col(n) for n in names]).alias("p"))
    computed = rows.select("row", jvm(*[F.concat(F.col(n), F.lit("")) if n == text else F.col(n)
                                        for n in names]).alias("p"))
    assert "TFBatchEval" in _explained(computed)
    assertDataFrameEqual(computed, direct)
    assert computed.count() == features.count()
    # no input column kept beside the results: each row read as it comes, none held
    scored = rows.select(jvm(*[F.col(n) for n in names]).alias("p"))
    got = scored.agg(F.sum("p.probability").alias("total"), F.count("*").alias("n")).first()
    assert got.n == features.count()
    assert got.total == pytest.approx(direct.agg(F.sum("p.probability").alias("t")).first().t, rel=1e-9)
    rows.unpersist()


def test_the_plan_has_no_python_and_sql_calls_it_by_name(spark, setup):
    cfg, model, features = setup
    jvm = register(spark, "census_plan", str(model), engine="jvm")
    features.createOrReplaceTempView("census_plan_rows")
    df = spark.sql("SELECT census_plan(struct(*)).label AS label, census_plan(struct(*)).probability AS p "
                   "FROM census_plan_rows WHERE age > 30")
    plan = _explained(df)
    assert "TFBatchEval" in plan and "Python" not in plan and "ArrowEval" not in plan, plan
    got = df.collect()
    assert len(got) == features.where("age > 30").count()
    assert {r.label for r in got} <= set(contract.class_names(jvm.spec))
    # an aggregate of the predictions, and a filter on them
    mean = spark.sql("SELECT avg(census_plan(struct(*)).probability) AS m FROM census_plan_rows").first().m
    assert 0.0 < mean < 1.0
    kept = spark.sql("SELECT count(*) AS n FROM census_plan_rows WHERE census_plan(struct(*)).probability >= 0.5")
    assert kept.first().n == sum(1 for r in features.select(jvm().alias("s")).collect() if r.s.probability >= 0.5)


def test_a_wrong_argument_fails_at_analysis(spark, setup):
    _, model, features = setup
    jvm = register(spark, "census_wrong", str(model), engine="jvm")
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="census_wrong takes the features as"):
        features.select(F.call_function("census_wrong", F.col("age"))).collect()


def test_counted_gives_the_python_udfs_counters(spark, setup):
    from tfos_jobs.serving.scoring import with_predictions

    _, model, features = setup
    python = register(spark, "census_count_py", str(model))
    jvm = register(spark, "census_count_jvm", str(model), engine="jvm")
    seen: dict[str, list] = {"py": [], "jvm": []}
    scored = {k: with_predictions(features, u, seen[k]) for k, u in (("py", python), ("jvm", jvm))}
    for k in scored:
        scored[k] = scored[k].cache()
        scored[k].count()
    counts = {k: python.counts_of(seen[k][0]) for k in seen}
    assert counts["py"] == counts["jvm"] and counts["jvm"][contract.COUNT_ROWS] == features.count()
    cols = ["predicted_probability"]
    assert scored["py"].select(F.sum(*cols)).first()[0] == pytest.approx(scored["jvm"].select(F.sum(*cols)).first()[0],
                                                                          rel=1e-6)


def test_auto_checks_the_jvm_against_python_and_uses_it(spark, setup):
    _, model, _ = setup
    udf = register(spark, "census_auto", str(model), engine="auto")
    assert udf.engine == "jvm" and udf.engine_reason == ""


def _resaved(model, out, probability):
    """The model re-saved to `out` with its serving signature's probability passed through `probability` (tensor in,
    tensor out), its examples signature and assets as they were."""
    import shutil

    import tensorflow as tf

    loaded = tf.saved_model.load(str(model / "saved_model"))
    serving, examples = loaded.signatures[contract.SERVING_SIGNATURE], loaded.signatures[contract.EXAMPLES_SIGNATURE]

    def scored(**inputs):
        outputs = dict(serving(**inputs))
        return {**outputs, contract.PROBABILITY: probability(outputs[contract.PROBABILITY])}

    holder = tf.Module()
    holder.inner = loaded
    concrete = tf.function(scored).get_concrete_function(**serving.structured_input_signature[1])
    tf.saved_model.save(holder, str(out), signatures={contract.SERVING_SIGNATURE: concrete,
                                                      contract.EXAMPLES_SIGNATURE: examples})
    shutil.copytree(model / "saved_model" / contract.ASSETS, out / contract.ASSETS, dirs_exist_ok=True)
    return out


def _with_newer_op(model, out):
    """The model with an op TensorFlow 2.20 added (DecodeWebP), which TensorFlow Java 1.1's 2.18 runtime lacks, on a
    branch never taken: Python serves it, the JVM cannot."""
    import tensorflow as tf

    def never_decoded(p):
        webp = tf.constant(b"RIFF")  # not an image: decoding it would fail, and the branch is never taken
        return tf.cond(tf.size(p) < 0, lambda: p + tf.cast(tf.size(tf.io.decode_webp(webp)), p.dtype), lambda: p)

    return _resaved(model, out, never_decoded)


def test_auto_falls_back_with_one_line_where_the_jvm_cannot_run_the_model(spark, setup, tmp_path, caplog):
    _, model, features = setup
    odd = _with_newer_op(model, tmp_path / "newer_op_model")
    with caplog.at_level("WARNING", logger="tfos_jobs.predict"):
        udf = register(spark, "census_newer_op", str(odd), engine="auto")
    assert udf.engine == "python"
    assert "DecodeWebP" in udf.engine_reason, udf.engine_reason
    lines = [r.getMessage() for r in caplog.records if "census_newer_op scores in a Python worker" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert features.select(udf().alias("s")).where("s.label IS NULL").count() == 0  # the Python UDF serves it
    with pytest.raises(ConfigError, match="engine 'jvm' cannot score"):
        register(spark, "census_newer_op_jvm", str(odd), engine="jvm")


def _with_py_function(model, out):
    """The model with its probability passed through a `tf.py_function`."""
    import tensorflow as tf

    return _resaved(model, out, lambda p: tf.ensure_shape(tf.py_function(lambda t: t, [p], p.dtype), p.shape))


def test_a_model_calling_a_py_function_is_refused_by_every_engine_before_any_query(spark, setup, tmp_path):
    """A loaded SavedModel holds only a key into the saving process's registry of Python functions: a Python worker
    fails on every row ("Could not find callback with key=pyfunc_0"), the JVM lacks the op; so none falls back."""
    _, model, _ = setup
    odd = _with_py_function(model, tmp_path / "py_function_model")
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    for engine in jvm_engine.ENGINES:
        with pytest.raises(ConfigError, match=r"serving_default signature calls a Python function \(op EagerPyFunc, "
                                              r"from tf.py_function or tf.numpy_function\)"):
            register(spark, f"census_py_function_{engine}", str(odd), engine=engine)
    with pytest.raises(ConfigError, match="its serving_default signature calls a Python function"):
        register(spark, "census_py_function_signature", str(odd), signature=contract.SERVING_SIGNATURE)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs  # refused on the driver: no query ran


def test_an_unknown_engine_is_refused(spark, setup):
    _, model, _ = setup
    with pytest.raises(ConfigError, match="engine 'gpu' is not one of python, jvm, auto"):
        register(spark, "census_gpu", str(model), engine="gpu")
    with pytest.raises(ConfigError, match="engine 'jvm' scores models tfos train exported"):
        register(spark, "census_by_signature", str(model), signature="serving_default", engine="jvm")
