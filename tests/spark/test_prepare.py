"""The prepare job end to end on a small census, and what it does with bad input."""
import json
import os
import subprocess
import sys

import pytest

from tfos_jobs import config
from tfos_jobs.data import synthetic
from tfos_jobs.data import dataset
from tfos_jobs.jobs import prepare
from tfos_jobs.errors import InputError, OutputExistsError

from tests.conftest import CENSUS, census_overrides

PEOPLE = 3000


@pytest.fixture(scope="module")
def raw(spark, tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    synthetic.generate(spark, str(raw), PEOPLE, 20.0, 42, "2026-01-01")
    return raw


@pytest.fixture(scope="module")
def prepared(spark, raw, tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "dataset"
    cfg = config.load(CENSUS, census_overrides(raw, out, PEOPLE))
    manifest = prepare.run(spark, cfg).to_dict()
    return cfg, out, manifest


def count_records(paths, compression=None):
    import tensorflow as tf

    return sum(1 for _ in tf.data.TFRecordDataset(paths, compression_type=compression))


def test_manifest_counts_match_the_files(prepared):
    cfg, out, manifest = prepared
    assert manifest["sources"]["people"]["rows"] == PEOPLE
    assert manifest["sources"]["regions"]["rows"] == len(synthetic.COUNTRIES)
    train, evals = manifest["splits"]["train"], manifest["splits"]["eval"]
    assert train["records"] + evals["records"] + manifest["rejected"]["rows"] == PEOPLE
    assert 0.15 < evals["records"] / PEOPLE < 0.25
    for split in ("train", "eval"):
        files = [str(out / split / f["path"]) for f in manifest["splits"][split]["files"]]
        assert len(files) == 4
        assert count_records(files) == manifest["splits"][split]["records"]
    assert (out / "_SUCCESS").exists()
    assert not list(out.parent.glob("*.staging-*"))


def test_meta_holds_spec_vocab_and_stats(prepared):
    cfg, out, manifest = prepared
    m = dataset.read(str(out))
    assert m.spec.stored_columns == cfg.features.stored_columns
    assert m.spec.get("age").default == pytest.approx(m.stats["age"]["mean"])
    assert 30 < m.stats["age"]["mean"] < 45 and m.stats["age"]["min"] >= 17
    assert m.vocab["sex"] == ["Male", "Female"]
    assert len(m.vocab["education"]) == 16
    assert len(m.vocab["native_country"]) <= 40
    assert manifest["vocabulary_sizes"]["education"] == 16
    assert manifest["spec_fingerprint"] == m.spec.fingerprint()
    # synthetic data has unknown workclass/occupation for ~5.6% of rows: imputed and counted
    imputed = manifest["imputed"]["by_column"]
    assert imputed["workclass"] == imputed["occupation"] > 0.03 * PEOPLE
    assert "__missing__" in m.vocab["workclass"]


def test_plain_tensorflow_reads_records_with_only_the_spec_json(prepared):
    """No tfos import: the JSON's "records" section is enough to build the parse spec."""
    import tensorflow as tf

    _, out, manifest = prepared
    columns = json.loads((out / "_meta" / "feature_spec.json").read_text())["records"]

    def feature(c):  # a list's shape is [null]: as many elements as the record holds
        dtype = tf.as_dtype(c["dtype"])
        return tf.io.RaggedFeature(dtype) if c["shape"] == [None] else tf.io.FixedLenFeature(c["shape"], dtype)

    parse_spec = {name: feature(c) for name, c in columns.items()}
    files = sorted(str(p) for p in (out / "eval").glob("part-*"))
    batch = next(iter(tf.data.TFRecordDataset(files).batch(64).map(lambda s: tf.io.parse_example(s, parse_spec))))
    assert set(batch) == set(columns)
    assert batch["age"].dtype == tf.float32 and batch["education"].dtype == tf.string
    assert set(batch["income"].numpy()) <= {0, 1}
    assert batch["recent_pages"].dtype == tf.string and batch["recent_pages"].shape[0] == 64
    assert 0 < max(len(pages) for pages in batch["recent_pages"].to_list()) <= 10  # census keeps the last 10 pages
    assert all(v.shape == (64,) for name, v in batch.items() if name != "recent_pages")


def test_reader_shards_files_per_worker(prepared):
    from tfos_jobs.data import reader

    _, out, manifest = prepared
    m = dataset.read(str(out))
    keys = []
    for index in range(2):
        ds = reader.make_dataset(m.files("train"), m.spec, 256, num_shards=2, shard_index=index, with_key=True)
        keys.append([int(k) for f, _ in ds for k in f["person_id"].numpy()])
    assert not set(keys[0]) & set(keys[1])
    assert len(keys[0]) + len(keys[1]) == manifest["splits"]["train"]["records"]
    features, label = next(iter(reader.make_dataset(m.files("train"), m.spec, 8)))
    assert sorted(features) == sorted(m.spec.model_inputs)
    assert label.shape == (8,)


def test_in_memory_reader_gives_each_shard_the_same_rows_reshuffled_every_epoch(prepared):
    from tfos_jobs.data import reader

    _, out, manifest = prepared
    m = dataset.read(str(out))
    files = m.files("train")

    def keys(ds) -> list[int]:
        return [int(k) for f, _ in ds for k in f["person_id"].numpy()]

    for shards, index in ((2, 0), (2, 1), (len(files) + 1, 3)):  # by file, and by record when files are too few
        streamed = keys(reader.make_dataset(files, m.spec, 256, num_shards=shards, shard_index=index, with_key=True))
        held = keys(reader.make_dataset(files, m.spec, 256, num_shards=shards, shard_index=index, with_key=True,
                                        in_memory=True))
        assert sorted(held) == sorted(streamed) and len(held) == len(set(held))  # the same rows, each once
    rows = len(keys(reader.make_dataset(files, m.spec, 256, num_shards=2, shard_index=0, with_key=True)))

    def epochs(seed: int) -> list[list[int]]:
        ds = reader.make_dataset(files, m.spec, 100, num_shards=2, shard_index=0, with_key=True, in_memory=True,
                                 shuffle=True, seed=seed, repeat=True)
        flat = keys(ds.take(-(-2 * rows // 100)))
        return [flat[:rows], flat[rows:2 * rows]]

    first, second = epochs(seed=5)
    assert sorted(first) == sorted(second) == sorted(set(first))  # each epoch: every row exactly once
    assert first != second  # a new permutation per epoch
    assert epochs(seed=5) == [first, second] and epochs(seed=6)[0] != first  # seeded
    assert reader.shard_bytes([("a", 10), ("b", 20), ("c", 30)], 2, 0) == 40  # files a and c
    assert reader.shard_bytes([("a", 10)], 3, 1) == 4  # a third of the one file, rounded up


def test_existing_output_is_refused_then_replaced_with_overwrite(spark, prepared):
    cfg, out, manifest = prepared
    with pytest.raises(OutputExistsError, match="exists; pass --overwrite"):
        prepare.run(spark, cfg)
    again = prepare.run(spark, cfg, overwrite=True).to_dict()
    assert again["splits"]["train"]["records"] == manifest["splits"]["train"]["records"]
    assert (out / "_meta" / "vocab" / "education.txt").read_text() == "\n".join(dataset.read(str(out)).vocab["education"]) + "\n"


def write_people(spark, path, rows, schema):
    spark.createDataFrame(rows, schema).write.mode("overwrite").parquet(str(path))


PEOPLE_SCHEMA = "person_id long, age int, job string, income string"


def tiny_config(tmp_path, people_path, **extra):
    toml = f"""
[sources.people]
format = "parquet"
path = "{people_path}"
[prepare]
main = "people"
output = "{tmp_path / 'out'}"
files_per_split = 2
[features.person_id]
kind = "key"
[features.age]
kind = "numeric"
[features.job]
kind = "categorical"
[features.income]
kind = "label"
positive = [">50K"]
negative = ["<=50K"]
"""
    path = tmp_path / "tiny.toml"
    path.write_text(toml)
    return config.load(path, [f"{k}={v}" for k, v in extra.items()])


def test_nulls_are_imputed_and_bad_labels_rejected_not_dropped(spark, tmp_path):
    rows = [(i, None if i % 10 == 0 else 20 + i % 40, None if i % 7 == 0 else f"j{i % 3}",
             None if i == 5 else ("maybe" if i == 6 else (">50K" if i % 4 == 0 else "<=50K")))
            for i in range(1, 201)]
    write_people(spark, tmp_path / "people", rows, PEOPLE_SCHEMA)
    manifest = prepare.run(spark, tiny_config(tmp_path, tmp_path / "people")).to_dict()
    assert manifest["rejected"]["rows"] == 2
    assert manifest["rejected"]["by_reason"] == {
        "label 'income' is null": 1, "label 'income' is not one of ['>50K', '<=50K']": 1}
    rejects = spark.read.json(str(tmp_path / "out" / "_rejects"))
    assert sorted(r.person_id for r in rejects.collect()) == [5, 6]
    assert manifest["imputed"]["by_column"] == {"age": 20, "job": 28}  # ids 5 and 6 excluded: 20 nulls, 28 nulls
    assert manifest["splits"]["train"]["records"] + manifest["splits"]["eval"]["records"] == 198
    m = dataset.read(str(tmp_path / "out"))
    assert "__missing__" in m.vocab["job"]


def test_missing_column_is_named_with_its_source(spark, tmp_path):
    write_people(spark, tmp_path / "people", [(1, 30, ">50K")], "person_id long, age int, income string")
    with pytest.raises(InputError) as err:
        prepare.run(spark, tiny_config(tmp_path, tmp_path / "people"))
    assert "column 'job' (categorical feature) is missing from every source (people)" in str(err.value)


def test_wrong_type_is_named(spark, tmp_path):
    write_people(spark, tmp_path / "people", [(1, "thirty", "a", ">50K")], "person_id long, age string, job string, income string")
    with pytest.raises(InputError) as err:
        prepare.run(spark, tiny_config(tmp_path, tmp_path / "people"))
    assert "column 'age' (numeric feature) has type string" in str(err.value)
    assert "in source 'people'" in str(err.value)


def test_empty_input_and_missing_path(spark, tmp_path):
    write_people(spark, tmp_path / "people", [], PEOPLE_SCHEMA)
    with pytest.raises(InputError, match=r"source 'people' \(.*people\) has no rows"):
        prepare.run(spark, tiny_config(tmp_path, tmp_path / "people"))
    with pytest.raises(InputError, match=r"source 'people' \(parquet .*nowhere\): .*PATH_NOT_FOUND"):
        prepare.run(spark, tiny_config(tmp_path, tmp_path / "nowhere"))
    assert not (tmp_path / "out").exists()


ADULT_DATA = """39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K
50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, <=50K
54, ?, 180211, Some-college, 10, Married-civ-spouse, ?, Husband, Asian-Pac-Islander, Male, 0, 0, 60, South, >50K
52, Self-emp-inc, 287927, HS-grad, 9, Married-civ-spouse, Exec-managerial, Wife, White, Female, 15024, 0, 40, ?, >50K

"""
ADULT_TEST = """|1x3 Cross validator
25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.
44, Private, 160323, Some-college, 10, Married-civ-spouse, Machine-op-inspct, Husband, Black, Male, 7688, 0, 40, United-States, >50K.
"""


def test_uci_adult_files_run_through_the_same_pipeline(spark, tmp_path):
    (tmp_path / "adult.data").write_text(ADULT_DATA)
    (tmp_path / "adult.test").write_text(ADULT_TEST)
    cfg = config.load(CENSUS.parent / "adult.toml", [
        f"sources.people.path={tmp_path}/adult.data,{tmp_path}/adult.test", f"prepare.output={tmp_path}/out",
        "spark.master=local[2]", "prepare.files_per_split=1", "features.native_country.min_count=1",
        "features.age.encoding=piecewise_linear", "features.age.bins=2",
    ])
    manifest = prepare.run(spark, cfg).to_dict()
    # the test file is the test split; eval is drawn from the train file's rows by the key's hash
    splits = {name: s["records"] for name, s in manifest["splits"].items()}
    assert splits["test"] == 2 and splits["train"] + splits["eval"] == 4 and min(splits.values()) >= 1
    assert manifest["rejected"]["rows"] == 0
    assert manifest["imputed"]["by_column"]["workclass"] == 1
    assert manifest["imputed"]["by_column"]["native_country"] == 1
    import tensorflow as tf

    m = dataset.read(str(tmp_path / "out"))
    assert m.has_test and (tmp_path / "out" / "test").is_dir()
    read = lambda split: next(iter(tf.data.TFRecordDataset(m.files(split)).batch(10).map(
        lambda s: tf.io.parse_example(s, m.spec.parse_spec()))))
    train_ages = sorted(read("train")["age"].numpy().tolist())
    eval_ages = read("eval")["age"].numpy().tolist()
    assert sorted(train_ages + eval_ages) == [39.0, 50.0, 52.0, 54.0]  # adult.data's rows only
    # bins: quantiles 0, 0.5, 1 of the train split's ages (one row: a bin one unit wide)
    median = train_ages[(len(train_ages) - 1) // 2]
    expected = sorted({train_ages[0], median, train_ages[-1]})
    assert m.stats["age"]["bins"] == (expected if len(expected) > 1 else [expected[0], expected[0] + 1])
    files = m.files("test")
    batch = next(iter(tf.data.TFRecordDataset(files).batch(10).map(lambda s: tf.io.parse_example(s, m.spec.parse_spec()))))
    assert sorted(batch["income"].numpy().tolist()) == [0, 1]  # "<=50K." and ">50K." with the dot stripped
    assert sorted(batch["age"].numpy().tolist()) == [25.0, 44.0]


def test_cli_reports_config_errors_before_spark_starts(tmp_path):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-m", "tfos_jobs.cli", "prepare", "--config", str(CENSUS), "--set", "prepare.compression=lz4"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    assert "prepare.compression: 'lz4' is not one of: none, gzip" in proc.stderr
    assert "SparkContext" not in proc.stderr and "log4j" not in proc.stderr


@pytest.mark.parametrize("fmt", ["csv", "json", "table"])
def test_csv_json_and_catalog_sources(spark, tmp_path, fmt):
    import collections

    import tensorflow as tf

    rows = [(i, 20 + i % 50, f"j{i % 4}" if i % 5 else "j9", ">50K" if i % 3 == 0 else "<=50K") for i in range(1, 101)]
    df = spark.createDataFrame(rows, PEOPLE_SCHEMA)
    if fmt == "csv":
        df.write.option("header", "true").csv(str(tmp_path / "people"))
    elif fmt == "json":
        df.write.json(str(tmp_path / "people"))
    else:
        df.createOrReplaceTempView("people_view")
    tiny_config(tmp_path, tmp_path / "people")  # writes tiny.toml
    source = ["sources.people.table=people_view"] if fmt == "table" else []
    cfg = config.load(tmp_path / "tiny.toml", [f"sources.people.format={fmt}", *source])
    manifest = prepare.run(spark, cfg).to_dict()
    assert manifest["sources"]["people"]["rows"] == 100
    assert manifest["splits"]["train"]["records"] + manifest["splits"]["eval"]["records"] == 100
    m = dataset.read(str(tmp_path / "out"))
    parse = {"job": tf.io.FixedLenFeature([], tf.string)}
    jobs = [tf.io.parse_single_example(r, parse)["job"].numpy().decode() for r in tf.data.TFRecordDataset(m.files("train"))]
    counts = collections.Counter(jobs)
    assert m.vocab["job"] == sorted(counts, key=lambda v: (-counts[v], v))
