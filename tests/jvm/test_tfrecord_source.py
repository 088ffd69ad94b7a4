"""The TFRecord Spark data source (jvm/tfrecord), checked against TensorFlow itself.

Uses the shared `spark` fixture, so it tests the jar the package ships (tfos_jobs/jars/).
"""

import glob
import gzip
import os
import struct
from pathlib import Path

import pytest

FORMAT = "tfos.spark.tfrecord"


def _tf():
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf

    return tf


def _files(path, pattern="*.tfrecord"):
    files = sorted(glob.glob(os.path.join(str(path), "**", pattern), recursive=True))
    assert files, f"no {pattern} files under {path}"
    return files


ALL_TYPES = (
    "id int, l long, f float, d double, s string, b binary, "
    "al array<long>, af array<float>, as array<string>"
)
ALL_ROWS = [
    (1, 10_000_000_000, 1.5, 0.25, "héllo", b"\x00\x01", [1, -2, 3], [0.5, 1.5], ["a", "bb"]),
    (2, -7, None, -3.5, None, None, [], [2.0], None),
    (3, None, -0.75, None, "", b"", None, [], ["", "ü", "c"]),
]


def test_round_trip_with_schema_and_inference(spark, tmp_path):
    from pyspark.testing import assertDataFrameEqual

    df = spark.createDataFrame(ALL_ROWS, ALL_TYPES)
    out = str(tmp_path / "ex")
    df.write.format(FORMAT).save(out)

    back = spark.read.format(FORMAT).schema(df.schema).load(out)
    assertDataFrameEqual(back, df)

    inferred = spark.read.format(FORMAT).load(out)
    types = {f.name: f.dataType.simpleString() for f in inferred.schema.fields}
    assert types == {
        "id": "bigint", "l": "bigint", "f": "float", "d": "float", "s": "string", "b": "string",
        "al": "array<bigint>", "af": "array<float>", "as": "array<string>",
    }
    assert all(f.nullable for f in inferred.schema.fields)
    row = inferred.where("id = 1").first()
    assert (row.l, row.d, row.s, row.b, row.al) == (10_000_000_000, 0.25, "héllo", "\x00\x01", [1, -2, 3])

    # Column pruning: only the asked-for features come back, with the right values.
    pruned = spark.read.format(FORMAT).schema(df.schema).load(out).select("id", "af").orderBy("id")
    assert [tuple(r) for r in pruned.collect()] == [(1, [0.5, 1.5]), (2, [2.0]), (3, [])]
    assert spark.read.format(FORMAT).load(out).count() == 3


def test_tensorflow_reads_spark_output(spark, tmp_path):
    tf = _tf()
    rows = [(i, i * 1.5, f"s{i}", list(range(i)), [float(i), -float(i)]) for i in range(1, 6)]
    df = spark.createDataFrame(rows, "id long, x double, s string, seq array<int>, pair array<float>")
    out = str(tmp_path / "ex")
    df.write.format(FORMAT).save(out)

    spec = {
        "id": tf.io.FixedLenFeature([], tf.int64),
        "x": tf.io.FixedLenFeature([], tf.float32),
        "s": tf.io.FixedLenFeature([], tf.string),
        "seq": tf.io.VarLenFeature(tf.int64),
        "pair": tf.io.FixedLenFeature([2], tf.float32),
    }
    parsed = {}
    for batch in tf.data.TFRecordDataset(_files(out)).batch(10):
        for name, value in tf.io.parse_example(batch, spec).items():
            if isinstance(value, tf.sparse.SparseTensor):
                value = tf.RaggedTensor.from_sparse(value).to_list()
            else:
                value = value.numpy().tolist()
            parsed.setdefault(name, []).extend(value)

    order = sorted(range(len(parsed["id"])), key=lambda k: parsed["id"][k])
    got = [tuple(parsed[n][k] for n in ["id", "x", "s", "seq", "pair"]) for k in order]
    assert got == [(i, i * 1.5, f"s{i}".encode(), list(range(i)), [float(i), -float(i)]) for i in range(1, 6)]


def _varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _unpacked_example(key_f, floats, key_i, ints):
    """An Example with UNPACKED float and int64 lists, as old proto2 writers produce."""
    float_list = b"".join(_varint(1 << 3 | 5) + struct.pack("<f", v) for v in floats)
    int_list = b"".join(_varint(1 << 3 | 0) + _varint(v) for v in ints)
    entries = _field(1, _field(1, key_f.encode()) + _field(2, _field(2, float_list)))
    entries += _field(1, _field(1, key_i.encode()) + _field(2, _field(3, int_list)))
    return _field(1, entries)


def test_spark_reads_tensorflow_written_records(spark, tmp_path):
    tf = _tf()

    def example(i):
        return tf.train.Example(features=tf.train.Features(feature={
            "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            "w": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5 * i, 2.0])),
            "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"n{i}".encode()])),
        })).SerializeToString()

    plain = tmp_path / "plain"
    plain.mkdir()
    with tf.io.TFRecordWriter(str(plain / "a.tfrecord")) as w:
        for i in range(3):
            w.write(example(i))
        unpacked = _unpacked_example("w", [1.25, -4.0], "id", [7, -1])
        # TensorFlow itself agrees on what the hand-made unpacked record holds.
        check = tf.train.Example.FromString(unpacked).features.feature
        assert list(check["w"].float_list.value) == [1.25, -4.0]
        assert list(check["id"].int64_list.value) == [7, -1]
        w.write(unpacked)

    df = spark.read.format(FORMAT).load(str(plain))
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields} == {
        "id": "array<bigint>", "w": "array<float>", "name": "string"}
    got = sorted(tuple(r) for r in df.select("id", "w", "name").collect())
    assert got == [([0], [0.0, 2.0], "n0"), ([1], [0.5, 2.0], "n1"), ([2], [1.0, 2.0], "n2"),
                   ([7, -1], [1.25, -4.0], None)]

    zipped = tmp_path / "zipped"
    zipped.mkdir()
    with tf.io.TFRecordWriter(str(zipped / "b.tfrecord.gz"), options="GZIP") as w:
        for i in range(10, 13):
            w.write(example(i))
    with gzip.open(zipped / "b.tfrecord.gz") as f:  # really gzip, so Spark must decompress it
        assert len(f.read()) > 0
    schema = "id long, w array<double>, name string"
    got = sorted(tuple(r) for r in spark.read.format(FORMAT).schema(schema).load(str(zipped)).collect())
    assert got == [(10, [5.0, 2.0], "n10"), (11, [5.5, 2.0], "n11"), (12, [6.0, 2.0], "n12")]


def test_sequence_example_read_by_tensorflow(spark, tmp_path):
    tf = _tf()
    from pyspark.testing import assertDataFrameEqual

    rows = [
        (1, "first", [[0.5, 1.0], [1.5, 2.0], [2.5, 3.0]], [[1], [2, 3]], [["a"], [], ["b", "c"]]),
        (2, "second", [[9.0, 8.0]], [], [["z"]]),
    ]
    df = spark.createDataFrame(
        rows, "id long, label string, frames array<array<float>>, tokens array<array<long>>, "
              "words array<array<string>>")
    out = str(tmp_path / "seq")
    df.coalesce(1).write.format(FORMAT).option("recordType", "SequenceExample").save(out)

    records = [r.numpy() for r in tf.data.TFRecordDataset(_files(out))]
    assert len(records) == 2
    context_spec = {"id": tf.io.FixedLenFeature([], tf.int64), "label": tf.io.FixedLenFeature([], tf.string)}
    sequence_spec = {
        "frames": tf.io.FixedLenSequenceFeature([2], tf.float32),
        "tokens": tf.io.VarLenFeature(tf.int64),
        "words": tf.io.VarLenFeature(tf.string),
    }
    ctx, seq = tf.io.parse_single_sequence_example(records[0], context_spec, sequence_spec)
    assert (int(ctx["id"]), ctx["label"].numpy()) == (1, b"first")
    assert seq["frames"].numpy().tolist() == [[0.5, 1.0], [1.5, 2.0], [2.5, 3.0]]
    assert tf.sparse.to_dense(seq["tokens"]).numpy().tolist() == [[1, 0], [2, 3]]
    assert tf.sparse.to_dense(seq["words"], b"").numpy().tolist() == [[b"a", b""], [b"", b""], [b"b", b"c"]]
    ctx, seq = tf.io.parse_single_sequence_example(records[1], context_spec, sequence_spec)
    assert (int(ctx["id"]), seq["frames"].numpy().tolist()) == (2, [[9.0, 8.0]])
    assert seq["tokens"].dense_shape.numpy().tolist()[0] == 0

    reader = spark.read.format(FORMAT).option("recordType", "SequenceExample")
    assertDataFrameEqual(reader.schema(df.schema).load(out), df)
    inferred = {f.name: f.dataType.simpleString() for f in reader.load(out).schema.fields}
    assert inferred == {"id": "bigint", "label": "string", "frames": "array<array<float>>",
                        "tokens": "array<array<bigint>>", "words": "array<array<string>>"}


@pytest.mark.parametrize("codec", ["gzip", "org.apache.hadoop.io.compress.GzipCodec"])
def test_gzip_codec_readable_by_tensorflow(spark, tmp_path, codec):
    tf = _tf()
    df = spark.range(100).selectExpr("id", "cast(id * 2 as float) as y")
    out = str(tmp_path / "gz")
    df.write.format(FORMAT).option("codec", codec).save(out)

    files = _files(out, "*")
    data = [f for f in files if not os.path.basename(f).startswith(("_", "."))]
    assert data and all(f.endswith(".tfrecord.gz") for f in data), data
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "y": tf.io.FixedLenFeature([], tf.float32)}
    ids, ys = [], []
    for batch in tf.data.TFRecordDataset(data, compression_type="GZIP").batch(64):
        parsed = tf.io.parse_example(batch, spec)
        ids += parsed["id"].numpy().tolist()
        ys += parsed["y"].numpy().tolist()
    assert sorted(zip(ids, ys)) == [(i, 2.0 * i) for i in range(100)]
    assert spark.read.format(FORMAT).load(out).selectExpr("sum(id)", "sum(y)").first() == (4950, 9900.0)


def test_partition_by_writes_dirs_without_partition_column(spark, tmp_path):
    tf = _tf()
    df = spark.createDataFrame([(i, "train" if i % 3 else "test") for i in range(12)], "id long, split string")
    out = tmp_path / "parts"
    df.write.format(FORMAT).partitionBy("split").save(str(out))

    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["split=test", "split=train"]
    for split, expected in [("train", [i for i in range(12) if i % 3]), ("test", [0, 3, 6, 9])]:
        ids = []
        for raw in tf.data.TFRecordDataset(_files(out / f"split={split}")):
            feature = tf.train.Example.FromString(raw.numpy()).features.feature
            assert set(feature.keys()) == {"id"}
            ids.append(feature["id"].int64_list.value[0])
        assert sorted(ids) == expected

    back = spark.read.format(FORMAT).load(str(out))
    assert sorted(tuple(r) for r in back.select("id", "split").collect()) == sorted(
        (i, "train" if i % 3 else "test") for i in range(12))


def test_byte_array_round_trip(spark, tmp_path):
    payloads = [b"\x00raw", b"", b"x" * 100_000]
    df = spark.createDataFrame([(p,) for p in payloads], "payload binary")
    out = str(tmp_path / "raw")
    df.coalesce(1).write.format(FORMAT).option("recordType", "ByteArray").save(out)
    tf = _tf()
    assert [r.numpy() for r in tf.data.TFRecordDataset(_files(out))] == payloads
    back = spark.read.format(FORMAT).option("recordType", "ByteArray").load(out)
    assert back.columns == ["byteArray"]
    assert [bytes(r.byteArray) for r in back.collect()] == payloads


def _error_text(excinfo):
    # Task failures arrive wrapped (SparkException / Py4J); the cause's message is in the text.
    return str(excinfo.value)


def test_error_null_inside_array_names_column(spark, tmp_path):
    df = spark.createDataFrame([(1, [1, None, 3])], "id long, vals_with_hole array<long>")
    with pytest.raises(Exception) as excinfo:
        df.write.format(FORMAT).save(str(tmp_path / "x"))
    text = _error_text(excinfo)
    assert "vals_with_hole" in text and "null element" in text


@pytest.mark.parametrize("sql_type", ["map<string,int>", "struct<a:int>", "date", "timestamp"])
def test_error_unsupported_type_names_column(spark, tmp_path, sql_type):
    df = spark.createDataFrame([], f"id long, odd_col {sql_type}")
    with pytest.raises(Exception) as excinfo:
        df.write.format(FORMAT).save(str(tmp_path / "x"))
    text = _error_text(excinfo)
    assert "odd_col" in text and sql_type in text


def test_error_nested_array_needs_sequence_example(spark, tmp_path):
    df = spark.createDataFrame([(1, [[1.0]])], "id long, frames array<array<float>>")
    with pytest.raises(Exception) as excinfo:
        df.write.format(FORMAT).save(str(tmp_path / "x"))
    assert "frames" in _error_text(excinfo) and "SequenceExample" in _error_text(excinfo)


def test_error_truncated_and_corrupt_files_name_path_and_offset(spark, tmp_path):
    df = spark.range(50).selectExpr("id", "repeat('v', 40) as s").coalesce(1)
    out = tmp_path / "t"
    df.write.format(FORMAT).save(str(out))
    (path,) = _files(out)
    data = Path(path).read_bytes()
    # Damage comes from outside Hadoop: drop the local FS's .crc sidecar, or it reports first.
    (out / f".{os.path.basename(path)}.crc").unlink()

    Path(path).write_bytes(data[:-7])  # cut inside the last record
    with pytest.raises(Exception) as excinfo:
        spark.read.format(FORMAT).schema("id long, s string").load(str(out)).collect()
    text = _error_text(excinfo)
    record = len(data) // 50
    assert os.path.basename(path) in text and f"byte offset {record * 49}" in text and "file ends" in text

    broken = bytearray(data)
    broken[record + 20] ^= 0xFF  # a data byte of the second record
    Path(path).write_bytes(bytes(broken))
    with pytest.raises(Exception) as excinfo:
        spark.read.format(FORMAT).schema("id long, s string").load(str(out)).collect()
    text = _error_text(excinfo)
    assert os.path.basename(path) in text and f"byte offset {record}" in text and "data CRC" in text

    broken = bytearray(data)
    broken[0] ^= 0x01  # the first record's length
    Path(path).write_bytes(bytes(broken))
    with pytest.raises(Exception) as excinfo:
        spark.read.format(FORMAT).load(str(out)).collect()  # inference reads the file too
    text = _error_text(excinfo)
    assert os.path.basename(path) in text and "byte offset 0" in text and "length CRC" in text


def test_error_type_mismatch_names_feature_and_file(spark, tmp_path):
    out = tmp_path / "m"
    spark.createDataFrame([("abc", [1, 2])], "word string, pair array<long>").coalesce(1).write.format(FORMAT).save(
        str(out))
    (path,) = _files(out)

    with pytest.raises(Exception) as excinfo:
        spark.read.format(FORMAT).schema("word long").load(str(out)).collect()
    text = _error_text(excinfo)
    assert "'word'" in text and "BytesList" in text and os.path.basename(path) in text

    with pytest.raises(Exception) as excinfo:
        spark.read.format(FORMAT).schema("pair long").load(str(out)).collect()
    text = _error_text(excinfo)
    assert "'pair'" in text and "2 values" in text and os.path.basename(path) in text


def test_error_inference_conflicting_kinds_names_feature(spark, tmp_path):
    """Inference over every file (inferSchemaFiles=all) refuses a feature of two kinds; from the
    first file alone (the default) the schema is that file's, and reading the other file then
    fails naming the feature and the file."""
    out = tmp_path / "c"
    spark.createDataFrame([(1,)], "clash long").write.format(FORMAT).save(str(out / "a"))
    spark.createDataFrame([("x",)], "clash string").write.format(FORMAT).save(str(out / "b"))
    with pytest.raises(Exception) as excinfo:
        spark.read.format(FORMAT).option("inferSchemaFiles", "all").load([str(out / "a"), str(out / "b")])
    text = _error_text(excinfo)
    assert "'clash'" in text and "Int64List" in text and "BytesList" in text
    sampled = spark.read.format(FORMAT).load([str(out / "a"), str(out / "b")])
    assert sampled.schema.simpleString() == "struct<clash:bigint>"
    with pytest.raises(Exception) as excinfo:
        sampled.collect()
    text = _error_text(excinfo)
    (written,) = [f for f in _files(out / "b") if os.path.getsize(f) > 0]
    assert "'clash'" in text and "BytesList" in text and os.path.basename(written) in text
    with pytest.raises(Exception, match="inferSchemaFiles must be a number of files"):
        spark.read.format(FORMAT).option("inferSchemaFiles", "none").load(str(out / "a"))


def _bytes_read(spark) -> int:
    """Bytes read from the local filesystem so far, by every reader of this JVM (a local master)."""
    stats = spark._jvm.org.apache.hadoop.fs.FileSystem.getGlobalStorageStatistics().get("file")
    return int(stats.getLong("bytesRead")) if stats is not None else 0


def test_reading_without_a_schema_reads_each_file_once(spark, tmp_path):
    """1 GiB in 64 files: inference reads the first file only, so loading and counting the
    dataset reads each file once (and the first twice); inferSchemaFiles=all reads them all."""
    one = tmp_path / "one"
    spark.range(40_000).selectExpr("id", "repeat('x', 400) as text", "array(id * 0.5, 1.0) as pair") \
        .coalesce(1).write.format(FORMAT).save(str(one))
    (path,) = _files(one)
    content = Path(path).read_bytes()
    data = tmp_path / "gib"
    data.mkdir()
    files = 64
    for i in range(files):  # TFRecord files hold independent records: copies are a valid dataset
        (data / f"part-{i:03d}.tfrecord").write_bytes(content)
    total = files * len(content)
    assert total >= 2**30 * 0.99

    before = _bytes_read(spark)
    df = spark.read.format(FORMAT).load(str(data))
    inferred = _bytes_read(spark) - before
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields} == {
        "id": "bigint", "text": "string", "pair": "array<float>"}
    assert len(content) <= inferred < 2 * len(content)  # the first file, once
    assert df.count() == files * 40_000
    assert _bytes_read(spark) - before < total + 2 * len(content)  # then each file once

    before = _bytes_read(spark)
    spark.read.format(FORMAT).option("inferSchemaFiles", "all").load(str(data))
    assert _bytes_read(spark) - before >= total
