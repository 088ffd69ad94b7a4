"""The parts of the load test of `tfos serve-sql` (tests/serving/test_sql_load.py): the server in a
process group of its own, PyHive sessions that run bounded loops, the memory of the server's
processes, latency percentiles, and the connections that are no client (wrong passwords,
garbage, silence). Every client here connects to 127.0.0.1 and gives up after a bounded time."""
from __future__ import annotations

import json
import math
import os
import queue
import random
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks import records
from tests.serving.test_sql_server import ROOT, Server

HOST = "127.0.0.1"
SOCKET_SECONDS = 120.0  # a client waits this long for any answer before it counts an error
STACK_MARKERS = ("\tat ", "Traceback (most recent call last)", "Caused by: ")
FIGURES = ROOT / "docs" / "benchmarks" / "sql_load.json"  # written with TFOS_RECORD_FIGURES=1 only
RECORD = FIGURES.with_suffix(".md")  # the same figures to read, linked from docs/benchmarks.md


class LoadServer(Server):
    """`Server` that knows the config file it reads and the model its function serves now."""

    def __init__(self, config_file: Path, overrides: list[str], port: int, env: dict[str, str], model: Path):
        super().__init__(config_file, overrides, port, env)
        self.config_file, self.model = config_file, model

    def drain(self) -> list[str]:
        """The lines printed and not yet read, now kept in `seen`."""
        start = len(self.seen)
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is None:  # the process ended: `wait_for` must still see it
                self.lines.put(None)
                break
            self.seen.append(line)
        return self.seen[start:]


def session(port: int, password: str, user: str = "analyst", timeout: float = SOCKET_SECONDS):
    """A PyHive connection whose socket gives up after `timeout` s: no client waits forever."""
    import thrift_sasl
    from pyhive import hive
    from thrift.transport import TSocket

    sock = TSocket.TSocket(HOST, port)
    sock.setTimeout(timeout * 1000)
    transport = thrift_sasl.TSaslClientTransport(lambda: hive.get_installed_sasl(
        host=HOST, sasl_auth="PLAIN", username=user, password=password), "PLAIN", sock)
    return hive.connect(thrift_transport=transport, username=user)


@dataclass(frozen=True)
class Call:
    session: int
    kind: str
    key: int | None  # a lookup's person_id
    started: float  # time.monotonic()
    ended: float
    rows: list[tuple] | None
    error: str = ""


Plan = Callable[[int, int], tuple[str, str, "int | None"]]  # (session, n-th call) -> kind, SQL, key


class Sessions:
    """`count` PyHive sessions, each running `plan(session, i)` one statement after another until
    `seconds` pass, `per_session` statements are done or `stop` is set; every call is kept."""

    def __init__(self, port: int, password: str, count: int, seconds: float, per_session: int, plan: Plan):
        self.port, self.password, self.per_session, self.plan = port, password, per_session, plan
        self.deadline = time.monotonic() + seconds
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.stop, self.finished = threading.Event(), threading.Event()
        self.running = count
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(count)]
        for t in self.threads:
            t.start()

    def _run(self, n: int) -> None:
        try:
            self._queries(n)
        finally:
            with self.lock:
                self.running -= 1
                if not self.running:
                    self.finished.set()

    def _queries(self, n: int) -> None:
        started = time.monotonic()
        try:
            conn = session(self.port, self.password)
        except Exception as e:  # a refused session is an error like any other
            self._keep(Call(n, "connect", None, started, time.monotonic(), None, f"{type(e).__name__}: {e}"))
            return
        try:
            cursor = conn.cursor()
            for i in range(self.per_session):
                if self.stop.is_set() or time.monotonic() >= self.deadline:
                    break
                kind, statement, key = self.plan(n, i)
                started = time.monotonic()
                try:
                    cursor.execute(statement)
                    self._keep(Call(n, kind, key, started, time.monotonic(), cursor.fetchall()))
                except Exception as e:
                    self._keep(Call(n, kind, key, started, time.monotonic(), None, f"{type(e).__name__}: {e}"))
        finally:
            try:
                conn.close()
            except Exception:  # the server may have gone: the error is counted above
                pass

    def _keep(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def join(self, timeout: float) -> list[Call]:
        """Every call, once every session ended (within `timeout` s, else the test fails)."""
        if not self.finished.wait(timeout):
            self.stop.set()
            raise AssertionError(f"{self.running} sessions still running after {timeout:.0f} s")
        return sorted(self.calls, key=lambda c: c.started)


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value at or above q% of them."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def latencies(calls: list[Call]) -> dict[str, dict[str, float]]:
    """Per kind: queries completed, p50 and p99 in milliseconds (reported, never asserted)."""
    out = {}
    for kind in sorted({c.kind for c in calls if not c.error}):
        ms = [1000 * (c.ended - c.started) for c in calls if c.kind == kind and not c.error]
        out[kind] = {"completed": len(ms), "p50_ms": round(percentile(ms, 50), 1),
                     "p99_ms": round(percentile(ms, 99), 1)}
    return out


def report(section: str, figures: dict, tmp_dir: Path) -> None:
    """Print the figures and keep them as JSON in `tmp_dir`, and, with TFOS_RECORD_FIGURES=1, in
    docs/benchmarks/sql_load.json (one section per test, the others kept) and as its page."""
    text = json.dumps(figures, indent=2, sort_keys=True)
    print(f"\n{section}: {text}")
    (tmp_dir / f"sql_load_{section}.json").write_text(text + "\n")
    if os.environ.get("TFOS_RECORD_FIGURES") == "1":
        kept = {**(json.loads(FIGURES.read_text()) if FIGURES.exists() else {}), section: figures}
        FIGURES.write_text(json.dumps(kept, indent=2, sort_keys=True) + "\n")
        RECORD.write_text(page(kept))
        records.refresh(str(RECORD.parent.with_suffix(".md")))  # docs/benchmarks.md carries the page


def page(sections: dict, written: str | None = None) -> str:
    """The recorded figures as a page: one list per test, nested keys joined with dots; `written`:
    when they were measured (default now)."""
    def flat(prefix: str, value) -> list[str]:
        if isinstance(value, dict):
            return [line for k, v in sorted(value.items()) for line in flat(f"{prefix}.{k}" if prefix else k, v)]
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):  # samples over time
            return flat(prefix, {k: ", ".join(f"{v[k]:,}" for v in value) for k in value[0]})
        shown = f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
        return [f"- {prefix}: {shown}"]

    lines = ["# tfos serve-sql under load", "",
             f"Written by `TFOS_RECORD_FIGURES=1 pytest tests/serving/test_sql_load.py -m slow` on "
             f"{written or time.strftime('%Y-%m-%d %H:%M %Z')}, every client on 127.0.0.1 ({os.cpu_count()} cores, shared by the "
             "server, its executors and the clients). Times in ms, memory (RSS) in MB. What each test asserts: "
             "[test_sql_load.py](../../tests/serving/test_sql_load.py).", ""]
    for section, figures in sorted(sections.items()):
        lines += [f"## {section}", "", *flat("", figures), ""]
    return "\n".join(lines)


# -- memory ------------------------------------------------------------------------------------

def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(rest[1]), name)
    return table


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def memory(server_pid: int) -> dict[str, float]:
    """RSS in MB of the server's Python process, of its driver JVM (its one `java` child) and, in
    sum, of the Python workers under that JVM (the UDF's; their number varies)."""
    table = processes()

    def below(pid: int) -> list[int]:
        kids = [c for c, (parent, _) in table.items() if parent == pid]
        return kids + [d for k in kids for d in below(k)]

    java = [c for c, (parent, name) in table.items() if parent == server_pid and name == "java"]
    assert len(java) == 1, f"the server's java child: {java}"
    workers = [p for p in below(java[0]) if table[p][1].startswith("python")]
    return {"python_mb": round(rss_mb(server_pid), 1), "jvm_mb": round(rss_mb(java[0]), 1),
            "python_workers_mb": round(sum(rss_mb(p) for p in workers), 1), "python_workers": len(workers)}


# -- connections that are no client ------------------------------------------------------------

SASL_START, SASL_COMPLETE = 1, 5  # Thrift's SASL negotiation statuses


def sasl_frame(status: int, payload: bytes) -> bytes:
    return bytes([status]) + len(payload).to_bytes(4, "big") + payload


def failed_login(port: int, user: str) -> str:
    """'refused' when the server refuses the wrong password as it should, else what happened."""
    try:
        session(port, "not-the-password", user, timeout=60.0).close()
        return "admitted"
    except Exception as e:
        return "refused" if "Error validating the login" in str(e) else f"{type(e).__name__}: {e}"


ABUSES = ("random bytes", "login begun, then silent", "login, then a garbage frame", "login, then half a frame")


def abuse(port: int, n: int, password: str, hold: float) -> str:
    """Connection `n` (its kind: ABUSES[n % 4]) sends its bytes, then waits up to `hold` s for the
    server to close it, and closes it; 'closed' (by the server) or 'held' (until we closed)."""
    rng = random.Random(n)
    kind = n % len(ABUSES)
    login = sasl_frame(SASL_START, b"PLAIN") + sasl_frame(SASL_COMPLETE, b"\0analyst\0" + password.encode())
    with socket.create_connection((HOST, port), timeout=hold) as s:
        if kind == 0:
            s.sendall(rng.randbytes(rng.randint(1, 512)))
        elif kind == 1:
            s.sendall(sasl_frame(SASL_START, b"PLAIN"))
        else:
            s.sendall(login)
            assert s.recv(5)[:1] == bytes([SASL_COMPLETE]), "the raw login was not admitted"
            garbage = rng.randbytes(rng.randint(1, 512))
            s.sendall(len(garbage).to_bytes(4, "big") + garbage if kind == 2 else (1000).to_bytes(4, "big") + garbage[:10])
        deadline = time.monotonic() + hold
        try:
            while time.monotonic() < deadline:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                if not s.recv(4096):
                    return "closed"
        except socket.timeout:
            pass
        except OSError:  # reset by the server
            return "closed"
    return "held"


def stack_lines(lines: list[str]) -> list[str]:
    """Lines of a Java or Python stack trace."""
    return [line for line in lines if any(m in line for m in STACK_MARKERS)]
