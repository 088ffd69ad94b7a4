"""The test broker itself: records round-trip with keys and timestamps, and stop leaves nothing running."""
from __future__ import annotations

import os
from pathlib import Path

from tests.hadoop.support import ensure_test_jars
from tests.kafka.broker import KafkaBroker

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_records_round_trip_with_keys_and_timestamps(kafka: KafkaBroker):
    kafka.create_topic("round-trip", partitions=3)
    sent = [(f"user-{i % 37}", f"event-{i}".encode(), BASE_MS + i * 1000) for i in range(1000)]
    assert kafka.produce("round-trip", sent) == 1000

    received = kafka.consume("round-trip", expected=1000)
    assert len(received) == 1000
    assert {r.key for r in received} == {f"user-{i}" for i in range(37)}
    assert {r.partition for r in received} == {0, 1, 2}  # keys spread over the partitions
    assert {(r.key, r.value, r.timestamp_ms) for r in received} == set(sent)


def running(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def group_members(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getpgid(int(entry.name)) == pgid and running(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_stop_leaves_no_broker_process(tmp_path):
    broker = KafkaBroker.start(tmp_path / "broker", ensure_test_jars() / "kafka")
    pid = broker.pid
    assert pid is not None and running(pid)
    try:
        broker.create_topic("before-stop", partitions=1)
    finally:
        broker.stop()
    assert not running(pid)
    assert group_members(pid) == []
    assert broker.pid is None and not (tmp_path / "broker" / "bootstrap").exists()
    broker.stop()  # a second stop finds nothing to do
