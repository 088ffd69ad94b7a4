"""Waiting for the TF servers a node's strategy connects to as it starts.

gRPC waits a whole second, its initial reconnect back-off, before it tries again a server that
refused its first connection. A node whose strategy starts before a peer's TF server listens
therefore lost that second, on about half of all cluster starts (docs/tuning.md, item 14d):
  * multi-worker: every worker connects to the chief, which leads TF's coordination service;
  * parameter server: the chief connects to every worker and parameter server.
So before its strategy starts, a node waits, polling every few milliseconds, until those
servers accept a TCP connection. The wait is bounded and never fails: past it, TF's own
retries (and errors) take over as before.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Iterable

from tfos_jobs.topology import Role, Strategy

POLL_SECONDS = 0.01
CONNECT_SECONDS = 0.5
WAIT_SECONDS = 30.0  # longer than any peer's start-up seen; the reservations already met


def servers_to_wait_for(strategy: str, tf_config: dict) -> list[str]:
    """The peers' addresses ("host:port") this node's strategy connects to as it starts."""
    cluster, task = tf_config.get("cluster", {}), tf_config.get("task", {})
    if strategy == Strategy.MULTI_WORKER_MIRRORED and task.get("type") != Role.CHIEF:
        return list(cluster.get(Role.CHIEF.value, []))
    if strategy == Strategy.PARAMETER_SERVER and task.get("type") == Role.CHIEF:
        return [*cluster.get(Role.WORKER.value, []), *cluster.get(Role.PS.value, [])]
    return []


def await_servers(strategy: str, timeout: float = WAIT_SECONDS) -> list[str]:
    """Wait (at most `timeout` s) until the servers of `servers_to_wait_for` listen, as TF_CONFIG
    names them; returns those that did not in time."""
    addresses = servers_to_wait_for(strategy, json.loads(os.environ.get("TF_CONFIG") or "{}"))
    return wait_listening(addresses, timeout)


def wait_listening(addresses: Iterable[str], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    waiting = list(addresses)
    while waiting and time.monotonic() < deadline:
        waiting = [a for a in waiting if not _listens(a)]
        if waiting:
            time.sleep(POLL_SECONDS)
    return waiting


def _listens(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS):
            return True
    except OSError:
        return False
