"""Texts, lists and vectors in the built-in model and its SavedModel. TensorFlow only, no Spark.

A small binary model is trained once on rows whose label depends on a word of a text, an
element of a list and a vector's first value; the export takes the raw text, the list padded
to its `max_length` and the vector."""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from tfos_jobs.config import ModelConfig
from tfos_jobs.contracts import serving as contract
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.features.spec import (CategoricalFeature, CrossedFeature, FeatureSpec, KeyFeature, Label, ListFeature,
                                     NumericFeature, TextFeature, VectorFeature)
from tfos_jobs.features.text import PAD
from tfos_jobs.model.builder import build_model, compile_model
from tfos_jobs.model.export import export_saved_model, load_signature

SPEC = FeatureSpec((
    KeyFeature("id"),
    TextFeature("review", max_tokens=6, ngrams=2, embedding_dim=4),
    ListFeature("tags", max_length=3, embedding_dim=3, combiner="sum"),
    VectorFeature("item_vec", dim=2),
    CategoricalFeature("shop", embedding_dim=2),
    NumericFeature("price", default=0.0),
    Label("y", task="binary"),
)).check()
WORDS = ["great", "awful", "fine", "okay", "box", "arrived", "late", "fast"]
VOCAB = {"review": [*WORDS, "great box"], "tags": ["gift", "sale", "new"], "shop": ["a", "b"]}
STATS = {"price": {"count": 800, "mean": 10.0, "std": 5.0, "min": 0.0, "max": 20.0}}
SMALL = ModelConfig(first_layer_size=16, num_layers=2, scale_factor=0.5)


def make_rows(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Label 1: "great" in the review, or "gift" among the tags, or a large first vector value."""
    rng = np.random.default_rng(seed)
    reviews, tags, y = [], [], []
    vec = rng.normal(0, 1, (n, 2)).astype(np.float32)
    for i in range(n):
        words = list(rng.choice(WORDS[1:], rng.integers(1, 5)))
        good = rng.random() < 0.3
        if good:
            words.insert(int(rng.integers(0, len(words))), "GREAT!")
        reviews.append(" ".join(words))
        row_tags = list(rng.choice(["sale", "new", "gift"], rng.integers(0, 4), replace=False))
        tags.append((row_tags + [PAD] * 3)[:3])
        y.append(int(good or "gift" in row_tags or vec[i, 0] > 1.2))
    return {"review": np.array(reviews, dtype=object), "tags": np.array(tags, dtype=object), "item_vec": vec,
            "shop": rng.choice(np.array(["a", "b"], dtype=object), n), "price": rng.uniform(0, 20, n).astype(np.float32),
            "y": np.array(y, np.int64)}


def inputs(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in rows.items() if k != "y"}


def train() -> tf.keras.Model:
    tf.keras.utils.set_random_seed(3)
    rows = make_rows(1600)
    model = compile_model(build_model(SPEC, VOCAB, STATS, SMALL), SPEC, "adam", 0.03)
    model.fit(inputs(rows), rows["y"], batch_size=64, epochs=8, verbose=0)
    return model


def export(model: tf.keras.Model, root: Path, spec: FeatureSpec = SPEC) -> Path:
    """The model as `tfos train` leaves it: `root/model/saved_model`, beside its dataset's `_meta/`."""
    root = root / "dataset"
    (root / "_meta" / "vocab").mkdir(parents=True)
    manifest = {"splits": {"train": {"records": 1600}}}
    for name, text in {"feature_spec.json": spec.to_json(), "stats.json": json.dumps(STATS),
                       "manifest.json": json.dumps(manifest)}.items():
        (root / "_meta" / name).write_text(text)
    for name, values in VOCAB.items():
        (root / "_meta" / "vocab" / f"{name}.txt").write_text("\n".join(values) + "\n")
    meta = DatasetMeta(str(root), spec, STATS, manifest, VOCAB)
    return Path(export_saved_model(model, meta, str(root.parent / "model" / "saved_model")))


@pytest.fixture(scope="module")
def trained():
    return train()


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> Path:
    return export(trained, tmp_path_factory.mktemp("bags"))


def test_the_model_learns_from_words_elements_and_vectors(trained):
    rows = make_rows(600, seed=9)
    p = trained.predict(inputs(rows), batch_size=256, verbose=0)[:, 0]
    assert float(np.mean((p >= 0.5) == rows["y"])) > 0.9
    probe = {k: np.repeat(v[:1], 4, axis=0) for k, v in inputs(rows).items()}
    probe["review"] = np.array(["box arrived late", "Box arrived LATE, GREAT", "great", "¡GREAT!"], dtype=object)
    probe["tags"] = np.array([["sale", PAD, PAD]] * 4, dtype=object)
    probe["item_vec"] = np.zeros((4, 2), np.float32)
    q = trained.predict(probe, verbose=0)[:, 0]
    assert q[0] < 0.5 < min(q[1:])
    assert q[2] == pytest.approx(q[3], abs=1e-6)  # the same tokens, whatever the case and the punctuation


def test_the_savedmodel_takes_raw_text_padded_lists_and_vectors(trained, exported):
    rows = make_rows(300, seed=5)
    serve = load_signature(str(exported))
    args = serve.structured_input_signature[1]
    assert (args["review"].shape.as_list(), args["review"].dtype) == ([None], tf.string)
    assert (args["tags"].shape.as_list(), args["tags"].dtype) == ([None, 3], tf.string)
    assert (args["item_vec"].shape.as_list(), args["item_vec"].dtype) == ([None, 2], tf.float32)
    out = serve(**{k: tf.constant(v) for k, v in inputs(rows).items() if k in SPEC.model_inputs})
    expected = trained.predict(inputs(rows), batch_size=128, verbose=0)[:, 0]
    np.testing.assert_allclose(out["probability"].numpy(), expected, atol=1e-6)
    assert contract.CODES_SIGNATURE not in tf.saved_model.load(str(exported)).signatures  # codes stand for one value a row
    assert sorted(os.listdir(exported / "assets" / "vocab")) == ["review.txt", "shop.txt", "tags.txt"]


def test_serving_ids_takes_the_texts_token_ids_and_answers_as_serving_default(exported):
    from tfos_jobs.features.text import PAD, graph_tokens

    rows = {k: v for k, v in inputs(make_rows(300, seed=6)).items() if k in SPEC.model_inputs}
    ids_fn = load_signature(str(exported), contract.IDS_SIGNATURE)
    review = SPEC.get("review")
    assert ids_fn.structured_input_signature[1]["review"].shape.as_list() == [None, review.width()]
    vocab = (exported / "assets" / "vocab" / "review.txt").read_text().splitlines()
    lookup = tf.keras.layers.StringLookup(vocabulary=vocab, mask_token=PAD, num_oov_indices=1)  # 0 pad, 1 unseen
    by_ids = ids_fn(**{k: tf.constant(v) for k, v in rows.items() if k != "review"},
                    review=lookup(graph_tokens(tf.constant(rows["review"]), review)))
    by_text = load_signature(str(exported))(**{k: tf.constant(v) for k, v in rows.items()})
    np.testing.assert_array_equal(by_ids["probability"].numpy(), by_text["probability"].numpy())


def test_predict_examples_reads_lists_of_any_length(trained, exported):
    rows = make_rows(50, seed=7)
    examples = []
    for i in range(50):
        tags = [t for t in rows["tags"][i] if t != PAD] + (["new", "sale"] if i % 5 == 0 else [])  # longer: cut
        feats = {"review": tf.train.Feature(bytes_list=tf.train.BytesList(value=[rows["review"][i].encode()])),
                 "tags": tf.train.Feature(bytes_list=tf.train.BytesList(value=[t.encode() for t in tags])),
                 "item_vec": tf.train.Feature(float_list=tf.train.FloatList(value=rows["item_vec"][i].tolist())),
                 "shop": tf.train.Feature(bytes_list=tf.train.BytesList(value=[rows["shop"][i].encode()])),
                 "price": tf.train.Feature(float_list=tf.train.FloatList(value=[float(rows["price"][i])]))}
        examples.append(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
        rows["tags"][i] = (tags + [PAD] * 3)[:3]
    out = load_signature(str(exported), contract.EXAMPLES_SIGNATURE)(examples=tf.constant(examples))
    expected = trained.predict(inputs(rows), batch_size=128, verbose=0)[:, 0]
    np.testing.assert_allclose(out["probability"].numpy(), expected, atol=1e-6)


def test_a_dry_build_checks_a_model_of_texts_lists_and_vectors():
    from tfos_jobs.config import ModelConfig as Model
    from tfos_jobs.model.builder import check_build, placeholder_batch

    batch = placeholder_batch(SPEC, SPEC.model_inputs)
    assert batch["tags"].shape == (2, 3) and batch["tags"].numpy()[0].tolist() == [b"tags_0", b"", b""]
    assert batch["item_vec"].shape == (2, 2) and batch["review"].shape == (2,)
    check_build(model_cfg=Model(), spec=SPEC)  # the built-in model over them builds and runs on the placeholders


CROSSED = FeatureSpec((*SPEC.features[:-1], CrossedFeature("review_x_shop", ("review", "shop"), hash_buckets=1000),
                       SPEC.label)).check()


def test_a_cross_of_a_text_and_a_category_adds_the_weight_of_each_token_in_that_category(tmp_path):
    from tfos_jobs.model import wide_deep

    tf.keras.utils.set_random_seed(4)
    model = build_model(CROSSED, VOCAB, STATS, SMALL)
    layers = wide_deep.of(model)
    logits = tf.keras.Model(model.inputs, model.get_layer("logits").output)
    probe = {k: np.repeat(v[:1], 4, axis=0) for k, v in inputs(make_rows(1)).items()}
    probe["review"] = np.array(["great box", "Great, GREAT!", "box", "great box"], dtype=object)
    probe["shop"] = np.array(["a", "a", "a", "b"], dtype=object)
    before = logits(probe).numpy()[:, 0]
    np.testing.assert_array_equal(model.get_layer("wide_review_x_shop").get_weights()[0], 0.0)  # starts at zero
    great, shop_a = layers.lookup["review"](tf.constant([["great"]])), layers.lookup["shop"](tf.constant(["a"]))
    bucket = int(layers.cross["review_x_shop"]([great, shop_a])[0, 0])
    weights = np.zeros((1001, 1), np.float32)
    weights[bucket] = 5.0  # only ("great", "a") weighs
    model.get_layer("wide_review_x_shop").set_weights([weights])
    shift = logits(probe).numpy()[:, 0] - before
    # "great" once and twice in shop a (its pairs "great box", "great great" are other tokens), not in "box", nor in b
    np.testing.assert_allclose(shift, [5.0, 10.0, 0.0, 0.0], atol=1e-5)

    exported = export(model, tmp_path, CROSSED)
    out = load_signature(str(exported))(**{k: tf.constant(v) for k, v in probe.items() if k in CROSSED.model_inputs})
    np.testing.assert_allclose(out["probability"].numpy(), model.predict(probe, verbose=0)[:, 0], atol=1e-6)
    by_ids = load_signature(str(exported), contract.IDS_SIGNATURE)(  # the cross reads the ids the caller gives
        **{k: tf.constant(v) for k, v in probe.items() if k in CROSSED.model_inputs and k != "review"},
        review=layers.lookup["review"](layers.tokenize["review"](tf.constant(probe["review"]))))
    np.testing.assert_array_equal(by_ids["probability"].numpy(), out["probability"].numpy())


def test_a_label_of_a_token_in_a_category_is_learned_through_the_cross():
    """y: "great" in shop a, or "awful" in shop b; the deep part alone would need to learn the interaction."""
    rows = make_rows(1600, seed=11)
    rows["review"] = np.array([r.replace("GREAT!", "awful") if i % 2 else r for i, r in enumerate(rows["review"])],
                              dtype=object)
    words = [set(r.lower().replace("!", "").split()) for r in rows["review"]]
    rows["y"] = np.array([int(("great" in w and s == "a") or ("awful" in w and s == "b"))
                          for w, s in zip(words, rows["shop"])], np.int64)
    tf.keras.utils.set_random_seed(5)
    model = compile_model(build_model(CROSSED, VOCAB, STATS, SMALL), CROSSED, "adam", 0.03)
    model.fit(inputs(rows), rows["y"], batch_size=64, epochs=4, verbose=0)
    wide = model.get_layer("wide_review_x_shop").get_weights()[0]
    assert np.abs(wide).max() > 0.1  # trained: the crossed ids reached the loss
    test = {k: v[:400] for k, v in rows.items()}
    p = model.predict(inputs(test), verbose=0)[:, 0]
    assert float(np.mean((p >= 0.5) == test["y"])) > 0.9


def test_a_cross_takes_one_text_or_list_not_two():
    spec = FeatureSpec((*SPEC.features, CrossedFeature("both", ("review", "tags")),
                        CrossedFeature("tags_x_shop", ("tags", "shop"))))
    errors = spec.errors()
    assert len(errors) == 1 and errors[0].startswith("features.both.columns: crosses 'review' and 'tags'"), errors
