"""`tfos serve-sql` under load, as a shared server meets it: 16 sessions mixing the demo's aggregate,
single-row lookups and status reads through a model swap; a 10-minute soak whose memory must
not grow; wrong passwords, garbage and silent connections beside a client that keeps getting
right answers. Latencies are reported (kept with TFOS_RECORD_FIGURES=1), never asserted: the
host may be loaded. Every client targets 127.0.0.1 and every loop is bounded in count and time."""
from __future__ import annotations

import collections
import concurrent.futures
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tfos_jobs.contracts import sql_endpoint as contract
from tfos_jobs.jobs.serve import sql

from tests.serving.load import (ABUSES, SOCKET_SECONDS, Call, LoadServer, Plan, Sessions, abuse, failed_login,
                                latencies, memory, report, session, stack_lines)
from tests.serving.test_sql_server import (FUNCTION, PASSWORD, close, free_port, in_process, lines_until, query,
                                           write_config)

SESSIONS, MIXED_SECONDS = 16, 150.0
SOAK_CLIENTS, WARMUP_SECONDS, SOAK_SECONDS, SAMPLE_SECONDS = 6, 60.0, 600.0, 60.0
LOGINS, LOGIN_THREADS, ABUSERS, ABUSE_THREADS, HOLD_SECONDS = 1000, 50, 100, 10, 5.0
KINDS = ("aggregate", "lookup", "lookup", "status")  # the mix each session cycles through
LOOKUP_TOLERANCE = 1e-6  # one row scored alone vs in a batch: float32 sums in another order
REFUSED = "WARN PasswordAuthenticator: login refused for user '"


@dataclass(frozen=True)
class Answers:
    """What one model answers: the aggregate (sorted rows) and each person's probability."""

    model: Path
    inputs: tuple[str, ...]
    aggregate: list[tuple]
    lookups: dict[int, float]


@pytest.fixture(scope="module")
def answers(spark, setup) -> Callable[[Path], Answers]:
    """`tfos sql`'s answers in this process, per model, computed once."""
    known: dict[Path, Answers] = {}

    def of(model: Path) -> Answers:
        if model not in known:
            aggregate, inputs = in_process(spark, setup, model)
            everyone = sql.run(spark, setup[0], f"SELECT person_id, {FUNCTION}({', '.join(inputs)}).probability "
                               f"FROM {sql.FEATURES_VIEW}", model=str(model), name=FUNCTION, rows=1, log=lambda _: None)
            known[model] = Answers(model, tuple(inputs), sorted(aggregate.collect()), dict(everyone.collect()))
        return known[model]

    return of


@pytest.fixture(scope="module")
def load_server(setup, tmp_path_factory):
    """One server for the module, in its own process group: killed whole when the module ends."""
    cfg, model, _ = setup
    config_file = tmp_path_factory.mktemp("sql-load") / "serve.toml"
    write_config(config_file, model)
    overrides = ["spark.master=local[2]", "spark.app_name=tfos-sql-load",
                 *(f"sources.{n}.path={s.path}" for n, s in cfg.sources.items())]
    srv = LoadServer(config_file, overrides, free_port(), {"TFOS_SQL_PASSWORD": PASSWORD}, model)
    try:
        srv.wait_for(contract.READY)
        yield srv
    finally:
        code = srv.stop()
        srv.kill()
    assert code == 0, "\n".join(srv.seen[-40:])


def plan(want: Answers) -> Plan:
    """Session n's i-th statement: KINDS in turn (shifted per session), 40 people looked up."""
    keys = sorted(want.lookups)[::len(want.lookups) // 40]
    features = ", ".join(want.inputs)

    def statement(n: int, i: int) -> tuple[str, str, int | None]:
        kind = KINDS[(n + i) % len(KINDS)]
        if kind == "aggregate":
            return kind, query(want.inputs), None
        if kind == "status":
            return kind, f"SELECT * FROM {contract.STATUS_VIEW}", None
        key = keys[(7 * n + i) % len(keys)]
        return kind, (f"SELECT person_id, {FUNCTION}({features}).probability FROM {sql.FEATURES_VIEW} "
                      f"WHERE person_id = {key}"), key

    return statement


def models_of(call: Call, candidates: list[Answers]) -> set[Path]:
    """The models whose whole answer the call got: none for a wrong answer or a mix of two."""
    rows = call.rows or []
    if call.kind == "aggregate":
        return {a.model for a in candidates if close(sorted(rows), a.aggregate)}
    if call.kind == "lookup":
        return {a.model for a in candidates if len(rows) == 1 and rows[0][0] == call.key
                and abs(rows[0][1] - a.lookups[call.key]) <= LOOKUP_TOLERANCE}
    model = contract.STATUS_COLUMNS.index(contract.MODEL)
    return {a.model for a in candidates if [(r[0], r[model]) for r in rows] == [(FUNCTION, str(a.model))]}


def checked(calls: list[Call], candidates: list[Answers]) -> list[Call]:
    """The calls answered; fails on any error and on any answer not wholly one model's."""
    errors = [c for c in calls if c.error]
    assert not errors, f"{len(errors)} of {len(calls)} calls failed, e.g. {errors[:3]}"
    wrong = [c for c in calls if not models_of(c, candidates)]
    assert not wrong, f"{len(wrong)} answers are no model's whole answer, e.g. {wrong[:2]}"
    return calls


@pytest.mark.slow  # 2.5 minutes of load, and a second model to swap in
def test_sixteen_sessions_mixed_through_a_model_swap(load_server, answers, second_model, tmp_path):
    srv = load_server
    first, second = answers(srv.model), answers(second_model)
    assert first.aggregate != second.aggregate  # the swap shows in the numbers
    load = Sessions(srv.port, PASSWORD, SESSIONS, MIXED_SECONDS, 100_000, plan(first))
    try:
        assert not load.finished.wait(MIXED_SECONDS / 2), "every session ended before the swap"
        write_config(srv.config_file, second_model)
        signalled = time.monotonic()
        srv.proc.send_signal(signal.SIGHUP)
        assert str(second_model) in srv.wait_for(contract.RELOADED, timeout=180)
        reloaded, srv.model = time.monotonic(), second_model
        load.deadline = max(load.deadline, reloaded + 30)  # however long the reload took: queries after it
    finally:
        calls = checked(load.join(MIXED_SECONDS + 2 * SOCKET_SECONDS), [first, second])
    assert calls[-1].started - calls[0].started >= 120
    before = [c for c in calls if c.ended < signalled]
    after = [c for c in calls if c.started > reloaded]
    # a query that ended before the SIGHUP had the first model; one begun after the reload, the second
    assert [c for c in before if first.model not in models_of(c, [first, second])] == []
    assert [c for c in after if second.model not in models_of(c, [first, second])] == []
    assert {c.kind for c in before} == {c.kind for c in after} == set(KINDS)
    assert {c.session for c in calls} == set(range(SESSIONS))
    report("mixed", {"sessions": SESSIONS, "seconds": round(calls[-1].ended - calls[0].started, 1),
                     "completed": len(calls), "errors": 0, "per_kind": latencies(calls),
                     "swap": {"sighup_to_reloaded_s": round(reloaded - signalled, 1),
                              "first_model_answers": len(before), "second_model_answers": len(after)}}, tmp_path)


@pytest.mark.slow  # 11 minutes
def test_memory_does_not_grow_over_a_ten_minute_soak(load_server, answers, tmp_path):
    srv = load_server
    want = answers(srv.model)
    load = Sessions(srv.port, PASSWORD, SOAK_CLIENTS, WARMUP_SECONDS + SOAK_SECONDS + 60, 10**6, plan(want))
    samples = []
    try:
        assert not load.finished.wait(WARMUP_SECONDS), "every session ended in the warm-up"
        samples.append(memory(srv.proc.pid))
        for _ in range(int(SOAK_SECONDS // SAMPLE_SECONDS)):
            assert not load.finished.wait(SAMPLE_SECONDS), "every session ended before the soak did"
            samples.append(memory(srv.proc.pid))
    finally:
        load.stop.set()
        calls = checked(load.join(2 * SOCKET_SECONDS), [want])
    start, end = samples[0], samples[-1]
    soaked = [c for c in calls if c.started >= calls[0].started + WARMUP_SECONDS]
    # The bound: after the warm-up the JVM's heap is sized for this load, but the collector may
    # still settle at another size, and Spark's UI keeps the last 1,000 queries and jobs (a
    # ceiling the warm-up may not have reached); Python's allocator keeps freed arenas. 25% + 64
    # MB leaves room for those; a leak that grows with the queries served passes it at the
    # per-query size reported as `leak_detected_kb_per_query` (1,714 queries on the 2-core test
    # host: about 290 KB a query for the JVM, 140 KB for Python).
    bounds = {k: round(start[k] * 1.25 + 64, 1) for k in ("jvm_mb", "python_mb")}
    report("soak", {"clients": SOAK_CLIENTS, "warmup_s": WARMUP_SECONDS, "soak_s": SOAK_SECONDS,
                    "completed": len(calls), "completed_in_soak": len(soaked), "errors": 0,
                    "per_kind": latencies(soaked), "rss_start": start, "rss_end": end, "bounds_mb": bounds,
                    "rss_every_minute": samples, "leak_detected_kb_per_query": {
                        k: round((bounds[k] - start[k]) * 1024 / len(soaked), 1) for k in bounds}}, tmp_path)
    assert end["jvm_mb"] <= bounds["jvm_mb"] and end["python_mb"] <= bounds["python_mb"], samples


@pytest.mark.slow  # about 2 minutes with the server's start: 1,000 refusals of a second each, 50 at a time
def test_failed_logins_and_garbage_leave_clients_served_without_a_stack(load_server, answers, tmp_path):
    """1,000 wrong passwords and 100 connections sending garbage or going silent halfway, while a
    client keeps querying: it gets the model's answers throughout, each refused login is one
    WARN line, and the abuse adds no other line (no stack trace) to what queries print anyway."""
    srv = load_server
    want = answers(srv.model)
    srv.drain()
    start = len(srv.seen)
    Sessions(srv.port, PASSWORD, 1, 300, len(KINDS), plan(want)).join(2 * SOCKET_SECONDS)
    assert failed_login(srv.port, "baseline") == "refused"  # its line closes what the queries printed
    baseline = {form(line) for line in lines_until(srv, f"{REFUSED}baseline'")}
    began = time.monotonic()
    client = Sessions(srv.port, PASSWORD, 1, 600, 10**4, plan(want))
    try:
        with concurrent.futures.ThreadPoolExecutor(LOGIN_THREADS) as logins, \
                concurrent.futures.ThreadPoolExecutor(ABUSE_THREADS) as garbage:
            refusals = [logins.submit(failed_login, srv.port, f"mallory{i}") for i in range(LOGINS)]
            abuses = [garbage.submit(abuse, srv.port, i, PASSWORD, HOLD_SECONDS) for i in range(ABUSERS)]
            done, pending = concurrent.futures.wait(refusals + abuses, timeout=2 * SOCKET_SECONDS + 300)
            assert not pending, f"{len(pending)} abusive connections still open"
        abused = time.monotonic() - began
        assert failed_login(srv.port, "sentinel") == "refused"  # its line closes what the others printed
        printed = lines_until(srv, f"{REFUSED}sentinel'")
        with session(srv.port, PASSWORD) as conn:  # a new session is admitted after all that
            cursor = conn.cursor()
            cursor.execute("SELECT 41 + 1")
            assert cursor.fetchall() == [(42,)]
    finally:
        client.stop.set()
        calls = checked(client.join(2 * SOCKET_SECONDS), [want])
    outcomes = collections.Counter(f.result() for f in refusals)
    assert outcomes == {"refused": LOGINS}, outcomes
    by_kind = collections.Counter((ABUSES[i % len(ABUSES)], f.result()) for i, f in enumerate(abuses))
    refused = [line for line in printed if REFUSED in line]
    assert len(refused) == LOGINS + 1 and len({line.split("'")[1] for line in refused}) == LOGINS + 1
    added = [line for line in printed if REFUSED not in line and form(line) not in baseline]
    assert added == [], added[:40]
    assert stack_lines(srv.seen[start:]) == [], stack_lines(srv.seen[start:])[:40]
    during = [c for c in calls if c.ended <= began + abused]
    assert during and calls[-1].ended > began + abused  # the client was answered during the abuse, and after
    report("abuse", {"failed_logins": LOGINS, "refused": outcomes["refused"], "abusive_connections": ABUSERS,
                     "abuse_outcomes": {f"{k} -> {o}": n for (k, o), n in sorted(by_kind.items())},
                     "seconds": round(abused, 1), "client_completed_during": len(during), "client_errors": 0,
                     "client_per_kind": latencies(during), "server_stack_lines": 0,
                     "server_lines_besides_refusals": len(printed) - len(refused)}, tmp_path)


def form(line: str) -> str:
    """A server line without its time, numbers and ids: what a kind of event prints."""
    return re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}|\d+", "#", line.split(" ", 2)[-1])
