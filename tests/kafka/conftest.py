"""The Kafka broker the tests of this directory share: one per test session (scripts/kafka-broker)."""
from __future__ import annotations

import sys
from typing import Iterator

import pytest

from tests.hadoop.support import Reaper, ensure_test_jars
from tests.kafka.broker import SCRIPT, KafkaBroker


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> Iterator[KafkaBroker]:
    """A running broker: .bootstrap, .create_topic(), .produce(), .consume(); stopped when the session ends."""
    jars = ensure_test_jars() / "kafka"
    directory = tmp_path_factory.mktemp("kafka")
    # The broker outlives the script that starts it: if this process is killed, the reaper stops it.
    reaper = Reaper([sys.executable, str(SCRIPT), "stop", "--dir", str(directory)], directory / "reaper.log")
    try:
        broker = KafkaBroker.start(directory, jars)
        try:
            yield broker
        finally:
            broker.stop()
    finally:
        reaper.disarm()
