"""A real Kafka broker for tests and benchmarks: started and stopped with scripts/kafka-broker, used
through confluent-kafka (the client the product produces with).

    broker = KafkaBroker.start(directory)      # jars from .cache/test-jars/kafka (make test-jars)
    broker.create_topic("events", partitions=3)
    broker.produce("events", [("user-1", b"{...}", 1767225600000), (None, "text", None)])
    records = broker.consume("events", expected=2)   # [Record(key, value, timestamp_ms, partition, offset)]
    broker.stop()
"""
from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterable, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "kafka-broker"


class Record(NamedTuple):
    """One consumed message; the key decoded as UTF-8."""
    key: str | None
    value: bytes
    timestamp_ms: int
    partition: int
    offset: int


class KafkaBroker:
    """A running broker (scripts/kafka-broker) whose files are in `directory`."""

    def __init__(self, directory: Path, bootstrap: str):
        self.directory = directory
        self.bootstrap = bootstrap

    @classmethod
    def start(cls, directory: Path, jars: Path | None = None, timeout: float = 90) -> KafkaBroker:
        cmd = [sys.executable, str(SCRIPT), "start", "--dir", str(directory), "--timeout", str(timeout)]
        if jars is not None:
            cmd += ["--jars", str(jars)]
        try:
            # The script bounds its wait by `timeout`, and formatting the storage by 120 s.
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=timeout + 180)
        except subprocess.TimeoutExpired:
            cls(directory, "").stop()  # the script was killed: the broker it started is not
            raise
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/kafka-broker start failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
        return cls(directory, proc.stdout.strip().splitlines()[-1])

    @property
    def pid(self) -> int | None:
        """The broker JVM's pid (the leader of its process group) while it runs."""
        try:
            return int((self.directory / "broker.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        # The tests' broker holds nothing worth a controlled shutdown: KILL after a few seconds.
        proc = subprocess.run([sys.executable, str(SCRIPT), "stop", "--dir", str(self.directory), "--grace", "5"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/kafka-broker stop failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")

    def create_topic(self, name: str, partitions: int = 2, timeout: float = 60) -> None:
        """Creates the topic and returns once every partition has a leader (producers and consumers
        then find it at once)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                                      request_timeout=timeout)
        futures[name].result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            topic = admin.list_topics(topic=name, timeout=10).topics.get(name)
            if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values())):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name}: not every one of {partitions} partitions has a leader "
                                   f"after {timeout:.0f} s")
            time.sleep(0.1)

    def produce(self, topic: str, records: Iterable[tuple[str | None, bytes | str, int | None]],
                timeout: float = 60) -> int:
        """Sends (key, value, timestamp in ms or None for now) records, waits until all are
        acknowledged and returns how many; raises on the first delivery error."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})
        errors: list[str] = []

        def delivered(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        count = 0
        for key, value, timestamp_ms in records:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, timestamp=timestamp_ms or 0, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
            count += 1
        remaining = producer.flush(timeout)
        if errors:
            raise KafkaException(f"{len(errors)} of {count} records to {topic} failed; first: {errors[0]}")
        if remaining:
            raise TimeoutError(f"{remaining} of {count} records to {topic} not acknowledged within {timeout:.0f} s")
        return count

    def partitions(self, topic: str, timeout: float = 30) -> list[int]:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        found = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if found is None or found.error is not None:
            raise KafkaException(f"topic {topic}: {found.error if found else 'not found'}")
        return sorted(found.partitions)

    def consume(self, topic: str, *, expected: int, timeout: float = 60) -> list[Record]:
        """The topic's records from the earliest offset of every partition, read until `expected`
        have come (it may return more when more are there); TimeoutError with the count read if
        they have not come within `timeout` seconds."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"tests-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            # Assigned, not subscribed: no group rebalance to wait for, and every partition from its start.
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                             for p in self.partitions(topic)])
            records: list[Record] = []
            deadline = time.monotonic() + timeout
            while len(records) < expected:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"read {len(records)} of {expected} records from {topic} in {timeout:.0f} s")
                for msg in consumer.consume(num_messages=1000, timeout=min(left, 1.0)):
                    if msg.error() is not None:
                        raise KafkaException(msg.error())
                    key, partition, offset = msg.key(), msg.partition(), msg.offset()
                    assert partition is not None and offset is not None  # set on every consumed message
                    records.append(Record(key.decode() if key is not None else None, msg.value() or b"",
                                          msg.timestamp()[1], partition, offset))
            return records
        finally:
            consumer.close()
