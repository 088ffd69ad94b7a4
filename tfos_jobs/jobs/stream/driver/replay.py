"""`tfos replay`: a table's rows sent to a Kafka topic as JSON events, at a fixed rate: a
stream to try `tfos stream` on, or to measure it with, from data at rest.

Rows are formatted by Spark (`to_json`: times as ISO 8601 with their zone, as the stream parses them) and come to the
driver a partition at a time. Sensor readings go in time order, keyed by asset; `disorder` displaces each event by up to
that many places, the way events from many machines arrive out of order (within the watermark, if it is small enough).
"""
from __future__ import annotations

import heapq
import random
import time
from typing import Any, Callable, Iterable, Iterator, Mapping

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config
from tfos_jobs.data import sources
from tfos_jobs.data.columns import CORRUPT
from tfos_jobs.data.sensor_sources import of_source, read_rows
from tfos_jobs.errors import ConfigError, TfosError

FLUSH_EVERY = 5_000  # events between waits for the broker's acknowledgements


def source_rows(spark: SparkSession, config: Config, source: str | None, where: str | None) -> DataFrame:
    """The rows of `source` (default: prepare.main and its unions) as events would hold them:
    sensor readings as key, time and sensors (rows that do not parse left out), rows as stored."""
    spec = config.features
    if spec.is_sequence:
        if source is not None:
            config = of_source(config, source)
        rows, _ = read_rows(spark, config, spec)
        rows = rows.where(F.col(CORRUPT).isNull()).select(*spec.stored_columns)
    else:
        name = source or config.prepare.main
        if name not in config.sources:
            raise ConfigError(f"--source: {name!r} is not a source; sources: {', '.join(config.sources)}")
        rows = sources.read(spark, name, config.sources[name])
    if not where:
        return rows
    try:
        return rows.where(where)
    except AnalysisException as e:
        raise ConfigError(f"--where: {where!r}: {str(e).splitlines()[0]}") from None


def as_events(rows: DataFrame, key: str | None, order_by: str | None) -> DataFrame:
    """`rows` as (key, value) strings, in `order_by` order when given."""
    if order_by:
        rows = rows.orderBy(order_by, *([key] if key else []))
    key_col = F.col(key).cast("string") if key else F.lit(None).cast("string")
    return rows.select(key_col.alias("key"), F.to_json(F.struct(*rows.columns)).alias("value"))


def displaced(items: Iterable[Any], disorder: int, seed: int) -> Iterator[Any]:
    """`items`, each moved by up to `disorder` places (0: in order)."""
    if disorder <= 0:
        yield from items
        return
    rng = random.Random(seed)
    heap: list[tuple[float, int, Any]] = []
    for i, item in enumerate(items):
        heapq.heappush(heap, (i + rng.uniform(0, disorder), i, item))
        while heap[0][0] <= i:
            yield heapq.heappop(heap)[2]
    while heap:
        yield heapq.heappop(heap)[2]


def send(events: DataFrame, *, bootstrap_servers: str, topic: str, rate: float, disorder: int = 0, seed: int = 0,
         kafka: Mapping[str, str] | None = None, log: Callable[[str], None] = print) -> int:
    """Produce every (key, value) row of `events` to `topic` at `rate` events per second (0: as
    fast as the broker takes them); the number sent. Delivery is acknowledged by every replica
    in sync before it returns: a failed send raises, naming the topic."""
    from confluent_kafka import KafkaError, Producer

    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, **dict(kafka or {})})
    started = time.monotonic()
    sent = 0
    rows = ((r["key"], r["value"]) for r in events.toLocalIterator(prefetchPartitions=True))
    for key, value in displaced(rows, disorder, seed):
        while True:
            try:
                producer.produce(topic, value=value.encode(), key=key.encode() if key is not None else None,
                                 on_delivery=delivered)
                break
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.05)
        sent += 1
        if sent % FLUSH_EVERY == 0:
            producer.poll(0)
            if failures:
                break
            log(f"replay: {sent:,} events sent to {topic} ({sent / (time.monotonic() - started):,.0f}/s)")
        if rate > 0:
            ahead = started + sent / rate - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)  # serves delivery reports while it waits
    left = producer.flush(60)
    if failures or left:
        raise TfosError(f"replay: {len(failures) + left:,} event(s) not delivered to {topic!r} at {bootstrap_servers}: "
                        + (failures[0] if failures else "the broker did not acknowledge them in 60 s"))
    log(f"replay: {sent:,} events sent to {topic} in {time.monotonic() - started:.1f} s")
    return sent


def create_topic(*, bootstrap_servers: str, topic: str, partitions: int, kafka: Mapping[str, str] | None = None) -> bool:
    """Create `topic` (the broker's default replication) unless it exists; whether it was created."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **dict(kafka or {})})
    if topic in admin.list_topics(timeout=30).topics:
        return False
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])[topic]
    try:
        future.result(timeout=60)
    except KafkaException as e:
        raise TfosError(f"cannot create topic {topic!r} at {bootstrap_servers}: {e}") from None
    return True
