"""Events from Kafka: the topic read as a stream, each record's value parsed as a JSON object
with the columns the events hold, and those that cannot be scored marked with the reason.

An event's columns are typed by `stream.schema` (DDL) or, without it, as the spec reads them: sensor readings as key,
time and sensors; rows as the columns of `prepare.main`, since events are the rows that table would get, but a text is a
string, a list an array and a vector an array of numbers, as JSON holds them, whatever the table stores them as. A value
that is not a JSON object, or holds a value of the wrong type, is `malformed`; one without the key (or, for readings,
without the time) is `missing_key` (`missing_time`). Nothing is filtered here: the reason travels with the event.
"""
from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, DoubleType, StringType, StructField, StructType

from tfos_jobs.config import Config
from tfos_jobs.contracts import stream as contract
from tfos_jobs.data import sources
from tfos_jobs.data.columns import CORRUPT
from tfos_jobs.data.sensor_sources import input_types
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec

Reason = contract.Reason
# Larger fetches than the Kafka client's (1 MB a partition): a micro-batch of 50,000 census rows was read 2.6 times
# faster with these. A shorter wait at the end of a partition than its 500 ms: a task reading up to the newest offset
# waited out the fetch its consumer had already sent there, half a second per partition, in every micro-batch that
# reaches the end of the topic (that is, every one once the backlog is drained). `stream.kafka` overrides them.
FETCH = {"max.partition.fetch.bytes": str(16 << 20), "fetch.max.bytes": str(64 << 20), "fetch.max.wait.ms": "10"}


def schema(spark: SparkSession, config: Config, spec: FeatureSpec) -> StructType:
    """The events' columns and types."""
    st = config.stream
    if st.schema:
        return given_schema(st.schema)
    if spec.is_sequence:
        readings = DataType.fromDDL(", ".join(f"`{n}` {t}" for n, t in input_types(spec).items()))
        assert isinstance(readings, StructType)  # a column list parses as one
        return readings
    main = config.prepare.main
    table = sources.read(spark, main, config.sources[main]).schema
    return StructType([StructField(c.name, json_type(spec, c.name, c.dataType), c.nullable) for c in table.fields])


def given_schema(ddl: str) -> StructType:
    """`stream.schema`, parsed."""
    try:
        parsed = DataType.fromDDL(ddl)
    except (PySparkException, ValueError) as e:
        raise ConfigError(f"stream.schema: {ddl!r} is not a DDL column list: {str(e).splitlines()[0]}") from None
    if not isinstance(parsed, StructType):
        raise ConfigError(f"stream.schema: {ddl!r} is not a column list (name TYPE, ...)")
    return parsed


def json_type(spec: FeatureSpec, column: str, stored: DataType) -> DataType:
    """How an event's JSON holds the main table's `column`: as the table types it, but for a text (a string), a list
    (an array: the table's, or of strings) and a vector (an array: the table's, or of numbers where it stores an ML
    Vector, a struct in JSON)."""
    kinds = {f.name: f.kind for f in (*spec.bags, *spec.vectors)}
    kind = kinds.get(column)
    if kind == "text":
        return StringType()
    if kind in ("list", "vector") and not isinstance(stored, ArrayType):
        return ArrayType(StringType() if kind == "list" else DoubleType())
    return stored


def read(spark: SparkSession, config: Config) -> DataFrame:
    """The topic as a stream of Kafka records (key, value, topic, partition, offset, timestamp)."""
    st = config.stream
    reader = spark.readStream.format("kafka") \
        .option("kafka.bootstrap.servers", st.bootstrap_servers) \
        .option("subscribe", st.topic) \
        .option("startingOffsets", st.starting_offsets) \
        .option("failOnDataLoss", "true")
    if st.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(st.max_offsets_per_trigger))
    given = {key.removeprefix("kafka."): value for key, value in st.kafka.items()}
    for key, value in {**FETCH, **given}.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def parsed(records: DataFrame, columns: StructType, spec: FeatureSpec) -> DataFrame:
    """Each record as its columns, `raw` (the value as text), `kafka_timestamp` (ms), and
    `reason` and `detail` (null for an event that can be scored)."""
    with_corrupt = StructType([*columns.fields, StructField(CORRUPT, StringType())])
    text = F.col("value").cast("string")
    event = F.from_json(text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    names = [f.name for f in columns.fields]
    table = records.select(event.alias("_event"), text.alias(contract.RAW),
                           (F.unix_micros("timestamp") / 1000).cast("long").alias(contract.EVENT_TIMESTAMP)) \
        .select(*[F.col(f"_event.`{n}`").alias(n) for n in names], F.col(f"_event.{CORRUPT}").alias(CORRUPT),
                contract.RAW, contract.EVENT_TIMESTAMP)
    reasons = _reasons(names, spec)
    reason, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for condition, why, words in reversed(reasons):  # the first that holds wins
        reason = F.when(condition, F.lit(why.value)).otherwise(reason)
        detail = F.when(condition, F.lit(words)).otherwise(detail)
    return table.withColumn(contract.REASON, reason).withColumn(contract.DETAIL, detail).drop(CORRUPT)


def _reasons(names: list[str], spec: FeatureSpec) -> list[tuple[Column, Reason, str]]:
    listed = ", ".join(names)
    out = [(F.col(contract.RAW).isNull(), Reason.MALFORMED, "the Kafka record has no value"),
           (F.col(CORRUPT).isNotNull(), Reason.MALFORMED,
            f"not a JSON object, or a value of the wrong type for its column (columns: {listed})")]
    if spec.key is not None:
        key = spec.key.name
        if key not in names:
            raise ConfigError(f"stream.schema: the events need the key column {key!r}; they have {listed}")
        out.append((F.col(key).isNull(), Reason.MISSING_KEY, f"{key} is missing or null"))
    if spec.is_sequence:
        time = spec.time.name
        if time not in names:
            raise ConfigError(f"stream.schema: sensor readings need the time column {time!r}; they have {listed}")
        out.append((F.col(time).isNull(), Reason.MISSING_TIME, f"{time} is missing, null or not a time"))
    return out
