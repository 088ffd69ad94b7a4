"""SavedModels `tfos train` did not export, served in SQL by one of their signatures: a `tf.saved_model.save`
module, a tf-keras `model.save` and a Keras 3 `model.export()` artifact, with nulls, casts, arrays, strings and
several outputs; a model whose graph does not give what its signature says is refused at registration."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import api
from tfos_jobs.errors import ConfigError
from udfs import register


def save_module(path: str, *, broken: bool = False) -> None:
    import tensorflow as tf

    class Pricing(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="amount"),
                                      tf.TensorSpec([None, 3], tf.int64, name="codes"),
                                      tf.TensorSpec([None], tf.string, name="label")])
        def serve(self, amount, codes, label):
            if broken:  # the graph refuses what the signature admits
                tf.debugging.assert_positive(amount, message="amount must be positive")
            total = amount * 2.0 + tf.cast(tf.reduce_sum(codes, axis=1), tf.float32)
            return {"total": total, "doubled": tf.cast(codes, tf.float32) * 2.0,
                    "tag": tf.strings.join([label, "!"]), "odd": tf.cast(codes % 2, tf.uint8)}

    module = Pricing()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})


@pytest.fixture(scope="module")
def people(spark):
    schema = T.StructType([T.StructField("amount", T.DoubleType()), T.StructField("codes", T.ArrayType(T.IntegerType())),
                           T.StructField("label", T.StringType())])
    return spark.createDataFrame([(1.5, [1, 2, 3], "a"), (None, [0, 0, 1], "b"), (-2.0, [5, 5, 5], "c")], schema)


def test_a_tensorflow_module_serves_by_its_signature_with_casts_arrays_strings_and_nulls(spark, people, tmp_path):
    save_module(str(tmp_path / "module"))
    with pytest.raises(ConfigError, match='signature="serving_default"'):
        register(spark, "price", str(tmp_path / "module"))  # no feature spec: the signature must be asked for
    price = register(spark, "price", str(tmp_path / "module"), signature="serving_default")
    assert [str(t) for t in price.signature.inputs] == ["amount float32[?]", "codes int64[?, 3]", "label string[?]"]
    people.createOrReplaceTempView("people")
    out = spark.sql("SELECT label, price(amount, codes, label) AS p FROM people")
    # uint8, which SQL lacks, widens to smallint
    assert out.schema["p"].dataType.simpleString() == \
        "struct<doubled:array<float>,odd:array<smallint>,tag:string,total:float>"
    expected = spark.createDataFrame(
        [("a", Row(doubled=[2.0, 4.0, 6.0], odd=[1, 0, 1], tag="a!", total=9.0)), ("b", None),
         ("c", Row(doubled=[10.0, 10.0, 10.0], odd=[1, 1, 1], tag="c!", total=11.0))], out.schema)
    assertDataFrameEqual(out, expected)
    assert price.counts() == {"null_rows": 1, "rows": 3}
    # called on DataFrame columns named as the inputs
    scored = people.select(price().alias("p")).orderBy("p.total").collect()
    assert [r.p.total if r.p is not None else None for r in scored] == [None, 9.0, 11.0]


def test_wrong_arguments_fail_at_analysis_or_name_the_argument_and_a_struct_of_them_scores(spark, people, tmp_path):
    save_module(str(tmp_path / "module"))
    price = register(spark, "price_sized", str(tmp_path / "module"), signature="serving_default", batch_size=2)
    assert price.checked
    with pytest.raises(AnalysisException, match=r"argument 1 \('amount'\) \(float32\[\?\] feature\) has type string"):
        spark.sql("SELECT price_sized('1.0', array(1, 2, 3), 'x') AS p")
    with pytest.raises(AnalysisException, match="price_sized takes the features as 3 arguments in this order: "
                                                "amount, codes, label"):
        spark.sql("SELECT price_sized(1.0, array(1, 2, 3)) AS p")
    with pytest.raises(Exception, match="argument codes: an array of 2 elements where the model takes 3"):
        spark.sql("SELECT price_sized(1.0, array(1, 2), 'x') AS p").collect()
    people.createOrReplaceTempView("people_struct")
    # columns named as the inputs, given out of the signature's order: their types could fit, the scores would not
    with pytest.raises(AnalysisException, match="argument 1 is the column 'label', which is input 3; argument 3 is "
                                                "the column 'amount', which is input 1. price_sized takes the "
                                                "features as 3 arguments in this order: amount, codes, label"):
        spark.sql("SELECT price_sized(label, codes, amount) AS p "
                  "FROM (SELECT amount AS label, codes, label AS amount FROM people_struct)")
    totals = spark.sql("SELECT price_sized(struct(*)).total AS t FROM people_struct ORDER BY t").collect()
    assert [r.t for r in totals] == [None, 9.0, 11.0]


def test_a_graph_that_does_not_give_what_its_signature_says_is_refused_at_registration(spark, tmp_path):
    save_module(str(tmp_path / "broken"), broken=True)
    with pytest.raises(ConfigError, match="signature 'serving_default' fails on a check batch of 2 rows of zeros: "
                                          ".*amount must be positive"):
        register(spark, "price_broken", str(tmp_path / "broken"), signature="serving_default")
    with pytest.raises(ConfigError, match=r"no signature 'predict'; it has \['serving_default'\]"):
        register(spark, "price_broken", str(tmp_path / "broken"), signature="predict")


def test_a_tf_keras_model_save_scores_as_its_predict(spark, tmp_path):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(1)
    a, b = tf.keras.Input((2,), name="a"), tf.keras.Input((1,), name="b")
    out = tf.keras.layers.Dense(1, activation="sigmoid", name="p")(tf.keras.layers.Concatenate()([a, b]))
    model = tf.keras.Model({"a": a, "b": b}, out)
    model.save(str(tmp_path / "keras"), save_format="tf")
    score = api.register_saved_model(spark, name="keras_score", model=str(tmp_path / "keras"))
    rows = [([0.5, -1.0], [2.0]), ([3.0, 0.25], [-1.0])]
    df = spark.createDataFrame(rows, "a array<double>, b array<double>")
    got = [r.s.p for r in df.select(score("a", "b").alias("s")).collect()]
    want = model.predict({"a": np.array([r[0] for r in rows]), "b": np.array([r[1] for r in rows])}, verbose=0)
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5)


def test_an_mlflow_model_of_the_tensorflow_flavour_is_found_by_its_mlmodel(spark, tmp_path):
    import mlflow.tensorflow
    import tensorflow as tf

    class Double(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="amount")])
        def __call__(self, amount):
            return {"twice": amount * 2.0}

    mlflow.tensorflow.save_model(Double(), str(tmp_path / "mlflow_model"))  # its SavedModel in tf2model/
    score = api.register_saved_model(spark, name="twice", model=str(tmp_path / "mlflow_model"))
    assert score.export_dir.endswith("/mlflow_model/tf2model")
    got = spark.sql("SELECT twice(x).twice AS t FROM VALUES (1.5), (-2.0) AS v(x) ORDER BY t").collect()
    assert [r.t for r in got] == [-4.0, 3.0]


@pytest.mark.slow  # Keras 3 in a process of its own, about a minute: `make test-all`
def test_a_keras_3_export_serves_in_sql(spark, tmp_path):
    script = textwrap.dedent(f"""
        import os
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
        import keras, numpy as np
        keras.utils.set_random_seed(2)
        x = keras.Input((4,), name="x")
        model = keras.Model(x, keras.layers.Dense(2, name="y")(x))
        model.export({str(tmp_path / "k3")!r})
        np.save({str(tmp_path / "k3.npy")!r}, model.predict(np.arange(8, dtype="float32").reshape(2, 4), verbose=0))
    """)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300, capture_output=True)
    score = register(spark, "k3_score", str(tmp_path / "k3"), signature="serving_default")
    (name,) = [t.name for t in score.signature.inputs]
    (output,) = [t.name for t in score.signature.outputs]
    df = spark.createDataFrame([([0.0, 1.0, 2.0, 3.0],), ([4.0, 5.0, 6.0, 7.0],)], f"{name} array<float>")
    got = [list(getattr(r.s, output)) for r in df.select(score().alias("s")).collect()]
    np.testing.assert_allclose(np.array(got), np.load(tmp_path / "k3.npy"), rtol=1e-5)
