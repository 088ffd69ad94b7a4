"""`tfos stream` on rows with a text, lists and a vector: JSON events parsed by the types the spec gives them (a text a
string, a list an array, a vector an array of numbers), scored as the SavedModel scores the same rows stored the way
prepare stores them, and the prediction function's counters (texts and lists cut, tokens and elements unseen, nulls)
on the progress lines, equal to those of the same rows scored in batch."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tests.kafka.test_stream import BIN, finished, started
from tfos_jobs import config
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.features.text import PAD
from tfos_jobs.jobs import prepare
from tfos_jobs.jobs.stream.driver import events, replay
from tfos_jobs.jobs.train.driver import tracked as train
from tfos_jobs.model.export import read_spec
from tfos_jobs.serving.scoring import with_predictions

pytestmark = pytest.mark.slow

KEY = "id"
SCHEMA = "id long, review string, tags array<string>, clicked array<bigint>, emb array<double>, shop string, " \
         "price double, y int"
CONFIG = """
[sources.rows]
format = "parquet"
path = "{raw}"

[prepare]
main = "rows"
output = "{root}/dataset"
files_per_split = 2

[train]
dataset = "{root}/dataset"
model_dir = "{root}/model"
strategy = "local"
epochs = 2
batch_size = 64
learning_rate = 0.01
tensorboard = false

[train.model]
first_layer_size = 16
num_layers = 2

[predict]
model = "{root}/model"
name = "predict_bags"

[features.id]
kind = "key"

[features.review]
kind = "text"
max_tokens = 5
min_count = 2
embedding_dim = 4

[features.tags]
kind = "list"
max_length = 3
embedding_dim = 3

[features.clicked]
kind = "list"
max_length = 2
embedding_dim = 3
combiner = "sum"

[features.emb]
kind = "vector"
dim = 2

[features.shop]
kind = "categorical"
embedding_dim = 2

[features.price]
kind = "numeric"

[features.y]
kind = "label"
task = "binary"
"""
WORDS = ["box", "arrived", "late", "quick", "shipping", "ok", "item", "great"]
# Rows the stream meets besides ordinary ones: non-ASCII letters and punctuation, a text longer than max_tokens, nulls
# everywhere, null and empty elements, lists longer than max_length, unseen words, elements and categories.
ODD = [
    (9001, "ÇAFÉ déjà-vu!!! Great, box.", ["gift", "sale"], [7], [0.5, -1.0], "a", 3.0, 1),
    (9002, "one two three four five six seven", ["sale", None, "", "new", "gift", "zzz"], [1, 2, 3], [2.0, 0.0],
     "b", 12.0, 0),
    (9003, None, None, None, None, None, None, 0),
    (9004, "", [], [], [0.0, 0.0], "nowhere", 7.5, 0),
    (9005, "великолепно 👍 box…arrived", ["mystery", "gift"], [99, 7], [1.5, 1.5], "c", 19.0, 1),
]


def rows(n: int, seed: int) -> list[tuple]:
    """y: "great" in the review, "gift" among the tags, item 7 clicked, or a large first vector value."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.sample(WORDS[:-1], rng.randint(1, 4)) + (["Great!"] if rng.random() < 0.25 else [])
        tags = rng.sample(["sale", "new", "gift", "home"], rng.randint(0, 3))
        clicked = rng.sample(range(1, 10), rng.randint(0, 2))
        emb = [rng.gauss(0, 1), rng.gauss(0, 1)]
        y = int("Great!" in words or "gift" in tags or 7 in clicked or emb[0] > 1.5)
        out.append((i, " ".join(words), tags, clicked, emb, rng.choice("abc"), rng.uniform(0, 20), y))
    return out


@pytest.fixture(scope="module")
def bag_stream_model(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("stream-bags")
    spark.createDataFrame(rows(1500, seed=1), SCHEMA).write.parquet(str(root / "raw"))
    path = root / "bags.toml"
    path.write_text(CONFIG.format(raw=root / "raw", root=root))
    cfg = config.load(path, ["spark.master=local[2]"])
    prepare.run(spark, cfg, log=lambda _: None)
    train.run(spark, cfg, overwrite=True)
    return cfg, root, path


def stored(model_dir, table: list[tuple]) -> dict[str, np.ndarray]:
    """The rows as the SavedModel takes them, by the rules prepare stores them with: a null text empty, a list's null
    and empty elements left out, cut to max_length and padded, a null vector zeros, a null category or number the
    spec's default."""
    spec = read_spec(str(model_dir / "saved_model"))
    shop, price = spec.get("shop"), spec.get("price")

    def elements(values, width):
        kept = [str(v) for v in values or [] if v is not None and v != ""][:width]
        return kept + [PAD] * (width - len(kept))

    return {"review": np.array([r[1] or "" for r in table], dtype=object),
            "tags": np.array([elements(r[2], 3) for r in table], dtype=object),
            "clicked": np.array([elements(r[3], 2) for r in table], dtype=object),
            "emb": np.array([r[4] or [0.0, 0.0] for r in table], np.float32),
            "shop": np.array([r[5] or shop.default for r in table], dtype=object),
            "price": np.array([price.default if r[6] is None else r[6] for r in table], np.float32)}


def test_the_json_schema_gives_a_text_a_string_a_list_and_a_vector_an_array(spark, bag_stream_model):
    cfg, _, _ = bag_stream_model
    types = {f.name: f.dataType.simpleString() for f in events.schema(spark, cfg, cfg.features).fields}
    assert (types["review"], types["tags"], types["clicked"]) == ("string", "array<string>", "array<bigint>")
    assert types["emb"] == "array<double>"


def test_texts_and_lists_from_kafka_are_scored_as_the_savedmodel_scores_them_and_counted(spark, kafka,
                                                                                       bag_stream_model):
    import tensorflow as tf

    from udfs import register

    cfg, root, path = bag_stream_model
    topic = "bag-rows"
    kafka.create_topic(topic, partitions=2)
    table = rows(300, seed=2) + ODD
    df = spark.createDataFrame(table, SCHEMA)
    sent = replay.send(replay.as_events(df, KEY, None), bootstrap_servers=kafka.bootstrap, topic=topic, rate=0,
                       log=lambda _: None)
    sets = ["spark.master=local[2]", f"stream.bootstrap_servers=\"{kafka.bootstrap}\"", f"stream.topic={topic}",
            f"stream.output={root / 'scores'}", f"stream.quarantine={root / 'quarantine'}",
            f"stream.checkpoint={root / 'checkpoint'}", f"stream.progress_log={root / 'micro_batches.jsonl'}",
            "stream.trigger_seconds=1", "stream.max_offsets_per_trigger=200", "stream.stop_when_idle_seconds=8"]
    log = root / "stream.log"
    out = finished(started([str(BIN / "tfos"), "stream", "--config", str(path),
                            *[a for s in sets for a in ("--set", s)]], log), log)
    assert "stream stopped (no event for 8 s)" in out

    got = spark.read.parquet(str(root / "scores")).toPandas().set_index(KEY)
    assert len(got) == sent == len(table) and not (root / "quarantine").exists()
    serve = tf.saved_model.load(str(root / "model" / "saved_model")).signatures[serving.SERVING_SIGNATURE]
    expected = serve(**{k: tf.constant(v) for k, v in stored(root / "model", table).items()})["probability"].numpy()
    probability = serving.predicted(serving.PROBABILITY)
    np.testing.assert_allclose(got.loc[[r[0] for r in table], probability], expected, atol=1e-6)

    lines = [json.loads(line) for line in (root / "micro_batches.jsonl").read_text().splitlines()]
    counts: dict[str, int] = {}
    for line in lines:
        for k, v in line[contract.COUNTS].items():
            counts[k] = counts.get(k, 0) + v
    batch = register(spark, "predict_bags_batch", str(root / "model"))
    seen: list = []
    with_predictions(df, batch, seen).collect()
    assert counts == batch.counts_of(seen[0])
    assert counts[serving.COUNT_ROWS] == len(table)
    for kind, feature in [("truncated", "review"), ("truncated", "tags"), ("truncated", "clicked"),
                          ("unseen", "review"), ("unseen", "tags"), ("unseen", "clicked"), ("unseen", "shop"),
                          ("null", "review"), ("null", "tags"), ("null", "emb"), ("null", "shop")]:
        assert counts.get(serving.count_key(kind, feature), 0) >= 1, (kind, feature, counts)
    assert "unseen:review" in log.read_text()  # on the console line of a micro-batch that met one
