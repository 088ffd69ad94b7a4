"""Prepare with text, list and vector features: the vocabularies of tokens and elements, what the manifest counts, the
records the package's TFRecord source writes, and the dense tensors the reader gives the model."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import api
from tfos_jobs.config.loading import build_spec
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.data import dataset, reader, tfrecord, transforms
from tfos_jobs.errors import InputError
from tfos_jobs.features import vocab
from tfos_jobs.features.text import PAD

SPEC = {
    "id": {"kind": "key"},
    "review": {"kind": "text", "max_tokens": 4, "min_count": 1},
    "tags": {"kind": "list", "max_length": 3},
    "items": {"kind": "list", "max_length": 2},
    "emb": {"kind": "vector", "dim": 3},
    "occupation": {"kind": "categorical", "hash_buckets": 8},
    "age": {"kind": "numeric"},
    "y": {"kind": "label", "task": "binary"},
}
SCHEMA = ("id long, review string, tags array<string>, items array<bigint>, emb array<double>, occupation string, "
          "age double, y int, part string")
ROWS = [
    (1, "Good, good movie!", ["a", "b"], [10, 20], [0.5, 0.25, 2.0], "x", 30.0, 1, "train"),
    (2, "bad movie", ["a", None, ""], [10], [1.0, 2.0, 3.0], "y", 40.0, 0, "train"),
    (3, None, None, None, None, None, None, 1, "train"),
    (4, "one two three four five six", ["c", "a", "b", "d", "e"], [30, 10, 20], [0.0, 0.0, 1.0], "x", 50.0, 0,
     "train"),
    (5, "good", ["b"], [20, None], [1.0, 1.0, 1.0], "z", 20.0, 1, "eval"),
    (6, "short vector", ["a"], [10], [1.0, 2.0], "x", 30.0, 0, "train"),
    (7, "vector with a hole", ["a"], [10], [1.0, None, 3.0], "x", 30.0, 0, "train"),
]
SPLIT = {"mode": "column", "column": "part"}
RECORDS = "id long, review string, tags array<string>, items array<string>, emb array<float>, occupation string, " \
          "age float, y long"


@pytest.fixture(scope="module")
def prepared(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("kinds") / "ds"
    table = spark.createDataFrame(ROWS, SCHEMA)
    manifest = api.prepare(spark, spec=SPEC, tables={"rows": table}, output=str(out), split=SPLIT, log=lambda _: None)
    return out, manifest.to_dict()


def test_vocabularies_hold_the_texts_tokens_and_the_lists_elements(prepared):
    out, manifest = prepared
    meta = dataset.read(str(out))
    # train rows only (not id 5), the text's first 4 words, the lists cut to max_length, count desc then value asc
    assert meta.vocab == {"review": ["good", "movie", "bad", "four", "one", "three", "two"],
                          "tags": ["a", "b", "c"], "items": ["10", "20", "30"]}
    assert manifest["vocabulary_sizes"] == {"review": 7, "tags": 3, "items": 3}  # occupation is hashed: none


def test_manifest_counts_nulls_cuts_left_out_elements_and_wrong_vectors(prepared):
    _, manifest = prepared
    assert manifest["imputed"] == {"rows": 1, "by_column": {
        "review": 1, "tags": 1, "items": 1, "emb": 1, "occupation": 1, "age": 1}}
    assert manifest["truncated"] == {"review": 1, "tags": 1, "items": 1}
    assert manifest["dropped_elements"] == {"tags": 2, "items": 1}
    assert manifest["rejected"]["by_reason"] == {"vector 'emb' has 2 values, not its dim 3": 1,
                                                 "vector 'emb' holds a null": 1}
    assert {s: v["records"] for s, v in manifest["splits"].items()} == {"train": 4, "eval": 1}


def test_the_tfrecord_source_writes_and_reads_back_lists_and_vectors(spark, prepared):
    out, _ = prepared
    back = spark.read.format(tfrecord.DEFAULT_FORMAT).schema(RECORDS).load(str(out / Split.TRAIN))
    mean_age = 40.0  # of the train rows' ages
    expected = spark.createDataFrame([
        (1, "Good, good movie!", ["a", "b"], ["10", "20"], [0.5, 0.25, 2.0], "x", 30.0, 1),
        (2, "bad movie", ["a"], ["10"], [1.0, 2.0, 3.0], "y", 40.0, 0),
        (3, "", [], [], [0.0, 0.0, 0.0], "__missing__", mean_age, 1),
        (4, "one two three four five six", ["c", "a", "b"], ["30", "10"], [0.0, 0.0, 1.0], "x", 50.0, 0),
    ], RECORDS)
    assertDataFrameEqual(back, expected)


@pytest.mark.parametrize("in_memory", [True, False])
def test_the_reader_gives_lists_dense_and_padded_and_vectors_as_dim_floats(prepared, in_memory):
    import numpy as np

    out, _ = prepared
    meta = dataset.read(str(out))
    ds = reader.make_dataset(meta.files(Split.TRAIN), meta.spec, batch_size=8, with_key=True, in_memory=in_memory)
    batches = list(ds)
    assert len(batches) == 1
    features, label = batches[0]
    order = np.argsort(features["id"].numpy())
    got = {name: features[name].numpy()[order] for name in ("review", "tags", "items", "emb")}
    assert got["tags"].shape == (4, 3) and got["items"].shape == (4, 2) and got["emb"].shape == (4, 3)
    assert got["review"].shape == (4,) and got["emb"].dtype == np.float32
    assert [[t.decode() for t in row] for row in got["tags"]] == [
        ["a", "b", PAD], ["a", PAD, PAD], [PAD, PAD, PAD], ["c", "a", "b"]]
    assert [[t.decode() for t in row] for row in got["items"]] == [["10", "20"], ["10", PAD], [PAD, PAD], ["30", "10"]]
    np.testing.assert_array_equal(got["emb"], np.array(
        [[0.5, 0.25, 2.0], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]], np.float32))
    assert [t.decode() for t in got["review"]] == ["Good, good movie!", "bad movie", "", "one two three four five six"]
    assert label.numpy()[order].tolist() == [1, 0, 1, 0]


def test_a_spark_ml_vector_column_is_read_as_its_values(spark, tmp_path):
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("emb", VectorUDT()), StructField("y", LongType())])
    rows = [(i, Vectors.dense([i, 0.5, -1.0]) if i != 3 else Vectors.sparse(3, {1: 2.0}), i % 2) for i in range(1, 9)]
    table = spark.createDataFrame(rows, schema)
    spec = {"id": {"kind": "key"}, "emb": {"kind": "vector", "dim": 3}, "y": {"kind": "label", "task": "binary"}}
    api.prepare(spark, spec=spec, tables={"rows": table}, output=str(tmp_path / "ds"), log=lambda _: None)
    back = spark.read.format(tfrecord.DEFAULT_FORMAT).schema("id long, emb array<float>") \
        .load([str(tmp_path / "ds" / s) for s in (Split.TRAIN, Split.EVAL)])
    expected = [(i, [float(i), 0.5, -1.0] if i != 3 else [0.0, 2.0, 0.0]) for i in range(1, 9)]
    assertDataFrameEqual(back, spark.createDataFrame(expected, "id long, emb array<float>"))


@pytest.mark.parametrize("column, ddl, accepted", [
    ("tags", "array<double>", "array<string>, array<byte>, array<short>, array<integer>, array<long>"),
    ("emb", "string", "array<float>, array<double>, array<decimal>, vector"),
    ("review", "array<string>", "string"),
])
def test_a_wrong_input_type_names_the_column_and_what_it_accepts(spark, tmp_path, column, ddl, accepted):
    fields = [f"{name} {ddl if name == column else kind}" for name, kind in
              (part.strip().split(" ", 1) for part in SCHEMA.split(", "))]
    table = spark.createDataFrame([], ", ".join(fields))
    with pytest.raises(InputError) as err:
        api.prepare(spark, spec=SPEC, tables={"rows": table}, output=str(tmp_path / "ds"), split=SPLIT)
    assert f"column {column!r} (" in str(err.value)
    assert accepted in str(err.value)
    assert not (tmp_path / "ds").exists()


def test_tokens_and_elements_are_made_in_the_jvm_not_in_python(spark):
    spec = build_spec(SPEC)
    table = spark.createDataFrame(ROWS, SCHEMA).drop("part")
    imputed = transforms.impute(table, spec, {"age": 0.0})
    records = imputed.select(*transforms.record_columns(spec))

    def in_python(df) -> bool:
        plan = df._jdf.queryExecution().executedPlan().toString()
        return "BatchEvalPython" in plan or "ArrowEvalPython" in plan

    assert not in_python(records) and not in_python(vocab.kept(imputed, spec.with_vocabulary))
    assert in_python(records.select(F.udf(lambda s: s.lower(), "string")("review")))  # what the check would see
