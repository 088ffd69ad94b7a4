"""The Python API end to end: prepare from a DataFrame, train your own Keras model on a
Spark cluster, register it as a SQL function and query it.

Run it with the venv's interpreter, nothing activated:  .venv/bin/python examples/python_api.py
Every result lands under ./python-api-output (or the directory given as the first argument).
"""
import os
import sys

from tfos_jobs import api
from tfos_jobs.config import ModelConfig, TrainConfig
from tfos_jobs.data import synthetic

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "python-api-output")
PEOPLE = 4000


def build(spec, vocab, stats, model_cfg):
    """A small model of our own: an embedding per categorical column, normalised numbers,
    `model_cfg.params["units"]` hidden units, one probability out."""
    import tensorflow as tf  # tf-keras: the API set TF_USE_LEGACY_KERAS before TensorFlow loaded

    units = int(model_cfg.params.get("units", 32))
    inputs, parts = {}, []
    for f in spec.categorical:
        inputs[f.name] = tf.keras.Input(shape=(), dtype=tf.string, name=f.name)
        ids = tf.keras.layers.StringLookup(vocabulary=vocab[f.name], num_oov_indices=1)(inputs[f.name])
        parts.append(tf.keras.layers.Embedding(len(vocab[f.name]) + 1, 4)(ids))
    for f in spec.numeric:
        inputs[f.name] = tf.keras.Input(shape=(), dtype=spec.input_dtype(f.name), name=f.name)
        mean, std = stats[f.name]["mean"], stats[f.name]["std"] or 1.0
        scaled = tf.keras.layers.Normalization(axis=None, mean=mean, variance=std * std)(inputs[f.name])
        parts.append(tf.keras.layers.Reshape((1,))(scaled))
    hidden = tf.keras.layers.Dense(units, activation="relu")(tf.keras.layers.Concatenate()(parts))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1, activation="sigmoid", name="probability")(hidden))


# The feature spec, built in code: the `[features]` table of a conf/*.toml, as a dict
# (`config.load("conf/census.toml").features` is a ready-made one).
SPEC = {
    "person_id": {"kind": "key"},
    "age": {"kind": "numeric"},
    "education_num": {"kind": "numeric"},
    "hours_per_week": {"kind": "numeric"},
    "capital_gain": {"kind": "numeric"},
    "education": {"kind": "categorical"},
    "occupation": {"kind": "categorical"},
    "marital_status": {"kind": "categorical"},
    "sex": {"kind": "categorical"},
    "income": {"kind": "label", "task": "binary", "positive": [">50K"], "negative": ["<=50K"]},
}


def main() -> None:
    spark = api.session(master="local-cluster[2,1,1536]", app_name="tfos-python-api",
                        conf={"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"})
    # A DataFrame held in memory (the embedded census-like people): nothing is read from disk.
    people = spark.createDataFrame(synthetic.people_chunk(0, PEOPLE, seed=7), synthetic.PEOPLE_SCHEMA)

    manifest = api.prepare(spark, spec=SPEC, tables={"people": people}, output=f"{OUT}/dataset", overwrite=True)
    print(f"prepared: train {manifest.splits['train'].records} eval {manifest.splits['eval'].records} records")

    settings = TrainConfig(workers=2, epochs=4, batch_size=64, learning_rate=0.01, model=ModelConfig(params={"units": 16}))
    result = api.train(spark, dataset=manifest, model_dir=f"{OUT}/model", build=build, config=settings, overwrite=True)
    print(f"trained: {len(result.nodes)} nodes, {result.epochs} epochs, eval auc {result.metrics['eval']['auc']:.4f}")

    predict = api.register(spark, name="predict_income", model=result)
    people.createOrReplaceTempView("people")
    rows = spark.sql("SELECT education, count(*) AS people, avg(predict_income(struct(*)).probability) AS p "
                     "FROM people GROUP BY education ORDER BY p DESC").collect()
    print(f"sql: {len(rows)} education levels scored with {predict.name}()")
    for row in rows[:3]:
        print(f"  {row['education']:<14} {row['people']:>5} people  mean probability {row['p']:.3f}")
    spark.stop()


if __name__ == "__main__":
    main()
