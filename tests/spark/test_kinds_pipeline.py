"""A table of texts, lists, vectors and a hashed id, through the API's steps: prepare, train,
then the prediction function on the raw table (`struct(*)`): it learns what the label depends
on, and the function scores as the SavedModel does on the rows prepare stored."""
from __future__ import annotations

import random

import numpy as np
import pytest
from pyspark.sql import functions as F

from tfos_jobs import api
from tfos_jobs.config import ModelConfig, TrainConfig

SPEC = {
    "id": {"kind": "key"},
    "review": {"kind": "text", "max_tokens": 8, "ngrams": 2, "min_count": 2, "embedding_dim": 8},
    "tags": {"kind": "list", "max_length": 4, "embedding_dim": 4},
    "clicked": {"kind": "list", "max_length": 3, "embedding_dim": 4, "combiner": "sum"},
    "emb": {"kind": "vector", "dim": 2},
    "user": {"kind": "categorical", "hash_buckets": 64, "embedding_dim": 4},
    "y": {"kind": "label", "task": "binary"},
}
WORDS = ["box", "arrived", "late", "quick", "shipping", "ok", "item", "again", "would", "buy"]


def table(n: int, seed: int) -> list[tuple]:
    """y: "love" in the review, "gift" among the tags, item 7 clicked, or a large first vector value."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = rng.sample(WORDS, rng.randint(2, 6))
        love = rng.random() < 0.25
        if love:
            words.insert(rng.randint(0, len(words)), "LOVE,")
        tags = rng.sample(["sale", "new", "gift", "home"], rng.randint(0, 3))
        clicked = rng.sample(range(1, 12), rng.randint(0, 3))
        emb = [rng.gauss(0, 1), rng.gauss(0, 1)]
        y = int(love or "gift" in tags or 7 in clicked or emb[0] > 1.5)
        rows.append((i, " ".join(words), tags, clicked, emb, f"user-{rng.randint(0, 500)}", y))
    return rows


SCHEMA = "id long, review string, tags array<string>, clicked array<bigint>, emb array<double>, user string, y int"


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds-pipeline")
    rows = spark.createDataFrame(table(3000, seed=1), SCHEMA)
    manifest = api.prepare(spark, spec=SPEC, tables={"rows": rows}, output=str(root / "dataset"), log=lambda _: None)
    result = api.train(spark, dataset=manifest, model_dir=str(root / "model"), log=lambda _: None,
                       config=TrainConfig(strategy="local", epochs=6, batch_size=64, learning_rate=0.01,
                                          tensorboard=False, model=ModelConfig(first_layer_size=32, num_layers=2)))
    return manifest, result


def test_prepared_trained_and_scored_in_sql(spark, trained):
    import tensorflow as tf

    manifest, result = trained
    assert set(manifest.vocabulary_sizes) == {"review", "tags", "clicked"}
    assert result.metrics["eval"]["accuracy"] > 0.9
    fresh = spark.createDataFrame(table(400, seed=2), SCHEMA)
    predict = api.register(spark, name="predict_kinds", model=result)
    scored = fresh.select("*", predict(F.struct(*fresh.columns)).alias("p")).collect()
    got = np.array([r.p.probability for r in scored])
    assert np.mean((got >= 0.5) == np.array([r.y for r in scored])) > 0.9
    serve = tf.saved_model.load(result.saved_model.removeprefix("file:")).signatures["serving_default"]
    pad = lambda values, width: [(list(map(str, values)) + [""] * width)[:width]]  # noqa: E731
    expected = serve(review=tf.constant([r.review for r in scored]),
                     tags=tf.constant([pad(r.tags, 4)[0] for r in scored]),
                     clicked=tf.constant([pad(r.clicked, 3)[0] for r in scored]),
                     emb=tf.constant([r.emb for r in scored], tf.float32),
                     user=tf.constant([r.user for r in scored]))["probability"].numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert predict.counts()["rows"] == 400 and predict.counts().get("unseen:review", 0) == 0
