"""A real Spark Connect server for the tests of this directory (`tfos connect-server`), one per
test session, on a local-cluster of three executors; stopped when the session ends, and by a
reaper if this process dies first. The Kafka broker is the one tests/kafka/ use."""
from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.hadoop.support import Reaper
from tests.kafka.conftest import kafka  # noqa: F401  (the broker fixture, shared)

MASTER = "local-cluster[3,1,1536]"  # a parameter-server run: a chief, a worker and a ps


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory) -> Iterator[str]:
    """The server's URL (sc://127.0.0.1:PORT)."""
    from tfos_jobs.deploy import connect_server as server

    directory = tmp_path_factory.mktemp("connect-server")
    tfos = str(Path(sys.executable).parent / "tfos")
    reaper = Reaper([tfos, "connect-server", "stop", "--dir", str(directory)],
                    directory / "reaper.log")
    try:
        url = server.start(directory, master=MASTER, port=free_port(), conf={"spark.ui.enabled": "false"})
        try:
            yield url
        finally:
            server.stop(directory)
    finally:
        reaper.disarm()
