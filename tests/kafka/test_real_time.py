"""`tfos stream` under Spark's real-time trigger (`stream.mode = "real_time"`): rows of features from Kafka scored inside
the executor JVM as they arrive, to an output topic, as the batch function scores them; each event's latency (its output
record's Kafka timestamp minus its input record's) measured at a steady 1,500 events/s and reported; a malformed event
sent on with its reason; every event out at least once across a kill and a restart; the sensor stream's per-asset
windows refused."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.commands import kill_group
from tests.conftest import CENSUS
from tests.kafka.test_stream import BIN, WAIT, finished, started
from tests.kafka.test_stream_rows import KEY, census_model  # noqa: F401  (the fixture)
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.jobs.stream.driver import real_time
from tfos_jobs.serving.scoring import input_table

pytestmark = pytest.mark.slow  # a model trained, a broker, two runs of a stream: make test-all

RATE = 1500  # events per second, sent in slices every TICK seconds
TICK = 0.01
LINGER_MS = real_time.LINGER_MS
SECONDS = 10  # of the measured run
# Seconds of events at the same rate before it: the stream's JIT compiler uses ~0.5 of a core for its first minute under
# load, which this machine's 2 cores do not have to spare beside the stream, the broker and the sender. The warm-up's own
# latency is reported too.
WARM = 60
BUDGET_MS = 100  # the p99 latency real-time mode is for (reported; the suite asserts no timings)


def events(spark, cfg, udf_spec) -> list[dict]:
    """The census people as their feature rows, one JSON object per person."""
    rows = input_table(spark, cfg, udf_spec).select(KEY, *udf_spec.model_inputs).toJSON().collect()
    return [json.loads(r) for r in rows]


def send_steadily(kafka, topic: str, values: list[dict], rate: int) -> list[int]:
    """`values` at `rate` per second, in slices every TICK seconds, by one producer that gathers what it is given
    within LINGER_MS into one request (as the stream's own producer does: a request per event costs the broker more
    CPU than this machine has beside the stream); the Kafka timestamps (ms) they were given, when each slice was
    handed to it, before that wait."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "1", "linger.ms": LINGER_MS})
    per_tick = max(1, int(rate * TICK))
    stamps, start = [], time.monotonic()
    for n, at in enumerate(range(0, len(values), per_tick)):
        wait = start + n * TICK - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = int(time.time() * 1000)
        for v in values[at:at + per_tick]:
            producer.produce(topic, value=json.dumps(v), key=str(v[KEY]), timestamp=now)
            stamps.append(now)
        producer.poll(0)
    assert producer.flush(60) == 0
    return stamps


def output_after(kafka, topic: str, keys: set[str], proc: subprocess.Popen, log) -> dict[str, list]:
    """The output topic's records by key, (Kafka timestamp, value) in order, once every one of `keys` is there; a
    failure naming why when the stream (`proc`, its output in `log`) exits first."""
    deadline, expected = time.monotonic() + WAIT, len(keys)
    while True:
        if proc.poll() is not None:
            pytest.fail(f"tfos stream exited ({proc.returncode}) before every event came out:\n{log.read_text()[-4000:]}")
        try:
            got = kafka.consume(topic, expected=expected, timeout=max(1.0, min(30.0, deadline - time.monotonic())))
        except TimeoutError:
            got = []
        by_key: dict[str, list] = {}
        for r in got:
            by_key.setdefault(r.key, []).append((r.timestamp_ms, json.loads(r.value)))
        missing = keys - set(by_key)
        if not missing:
            return by_key
        if time.monotonic() > deadline:
            pytest.fail(f"{len(missing)} of {len(keys)} events never came out of {topic}, e.g. {sorted(missing)[:5]}")
        expected = max(expected, len(got)) + len(missing)


def wait_for_line(log, text: str, proc: subprocess.Popen, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_group(proc)
            pytest.fail(f"no {text!r} from tfos stream:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def stream_command(overrides: list[str], kafka, topic: str, out_topic: str, checkpoint, *, batch_seconds: float
                   ) -> list[str]:
    """`tfos stream` in real-time mode on the census model, from `topic` to `out_topic`, local[2]."""
    sets = [*overrides, f"stream.bootstrap_servers=\"{kafka.bootstrap}\"", f"stream.topic={topic}",
            f"stream.output_topic={out_topic}", f"stream.checkpoint={checkpoint}", "stream.mode=real_time",
            f"stream.real_time_batch_seconds={batch_seconds:g}", "spark.master=local[2]",
            "spark.conf.spark.ui.showConsoleProgress=false"]
    return [str(BIN / "tfos"), "stream", "--config", str(CENSUS), *[a for s in sets for a in ("--set", s)]]


def test_each_event_is_scored_as_it_arrives(spark, kafka, census_model, tmp_path):
    from udfs import register

    cfg, root, overrides = census_model
    udf = register(spark, "rt_batch_income", str(root / "model"))
    people = events(spark, cfg, udf.spec)
    topic, out_topic = "rt-people", "rt-people-scored"
    kafka.create_topic(topic, partitions=1)
    kafka.create_topic(out_topic, partitions=1)
    cmd = stream_command(overrides, kafka, topic, out_topic, tmp_path / "checkpoint", batch_seconds=120)

    # warm: the first events load the model on the executor; the run measured starts once they are out
    log = tmp_path / "stream.log"
    proc = started(cmd, log)
    try:
        wait_for_line(log, "in real time", proc)
        # warm-up at the measured rate: the JIT compiler and TensorFlow's first calls take the first seconds
        warm = [dict(p, **{KEY: -1 - i}) for i, p in enumerate((people * (WARM * RATE // len(people) + 1))[:WARM * RATE])]
        bad = ['{"person_id": 200000, "age": "old"}']
        kafka.produce(topic, [("200000", bad[0], None)])
        warm_stamps = send_steadily(kafka, topic, warm, RATE)
        warm_out = output_after(kafka, out_topic, {str(v[KEY]) for v in warm} | {"200000"}, proc, log)
        measured = (people * (RATE * SECONDS // len(people) + 1))[:RATE * SECONDS]
        measured = [dict(p, **{KEY: n}) for n, p in enumerate(measured)]
        stamps = send_steadily(kafka, topic, measured, RATE)
        out = output_after(kafka, out_topic, {str(v[KEY]) for v in measured} | {"200000"}, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
    text = finished(proc, log)
    assert "stream stopped (SIGTERM)" in text

    first_minute = np.array([warm_out[str(v[KEY])][0][0] - t for v, t in zip(warm, warm_stamps)])
    slices = [first_minute[s * RATE:(s + 10) * RATE] for s in range(0, WARM, 10)]
    print(f"real-time latency in the {WARM} s of warm-up, p50/p99 per 10 s (ms; the first events wait for the query's "
          f"task to start and TensorFlow's first call): "
          + ", ".join(f"{np.percentile(s, 50):.0f}/{np.percentile(s, 99):.0f}" for s in slices))
    latency = np.array([out[str(n)][0][0] - stamps[n] for n in range(len(measured))])
    p50, p99 = np.percentile(latency, [50, 99])
    print(f"real-time latency at {RATE} events/s over {SECONDS} s: p50 {p50:.0f} ms, p99 {p99:.0f} ms, "
          f"max {latency.max():.0f} ms ({'within' if p99 <= BUDGET_MS else 'over'} {BUDGET_MS} ms)")
    per_second = [int(np.median(latency[s * RATE:(s + 1) * RATE])) for s in range(SECONDS)]
    print(f"median latency per second of the run (ms): {per_second}")
    assert (latency >= 0).all() and len(latency) == RATE * SECONDS
    first = {k: v[0][1] for k, v in out.items() if k != "200000"}
    assert all(serving.predicted(serving.LABEL) in v and 0 <= v[serving.predicted(serving.PROBABILITY)] <= 1
               for v in first.values())
    assert {v[contract.MODEL_VERSION] for v in first.values()} == {udf.version}
    # the same scores as the batch function, for the same rows
    probability = serving.predicted(serving.PROBABILITY)
    batch = {r[KEY]: r.s.probability for r in input_table(spark, cfg, udf.spec).select(
        KEY, udf().alias("s")).collect()}
    for n in range(0, len(measured), 97):  # measured[n] is people[n % len(people)] under another key
        assert first[str(n)][probability] == pytest.approx(batch[people[n % len(people)][KEY]], abs=1e-5)

    # an event that cannot be parsed came out too, with its reason and raw value
    quarantined = out["200000"][0][1]
    assert quarantined[contract.REASON] == contract.Reason.MALFORMED.value and quarantined[contract.RAW] == bad[0]


def test_sensor_windows_are_refused_in_real_time(tmp_path):
    """Windows per asset are state, which real-time mode cannot keep: refused before anything starts."""
    fleet = CENSUS.parent / "fleet.toml"
    proc = subprocess.run([str(BIN / "tfos"), "stream", "--config", str(fleet), "--set", "stream.mode=real_time",
                           "--set", "stream.output_topic=out", "--set", f"stream.checkpoint={tmp_path / 'c'}",
                           "--set", "spark.master=local[1]"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "keeps no state" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_a_killed_real_time_stream_restarts_and_every_event_comes_out(spark, kafka, census_model, tmp_path):
    """At least once to Kafka: a run killed while events arrive (SIGKILL, nothing flushed), started again with its
    checkpoint, sends every event the topic holds, those before the kill and those sent while it was down; an event
    scored after the last commit may come out twice, with the same key, label and probability (within 1e-5)."""
    from udfs import register

    cfg, root, overrides = census_model
    udf = register(spark, "rt_restart_income", str(root / "model"))
    people = events(spark, cfg, udf.spec)
    topic, out_topic = "rt-restart", "rt-restart-scored"
    kafka.create_topic(topic, partitions=2)
    kafka.create_topic(out_topic, partitions=1)
    cmd = stream_command(overrides, kafka, topic, out_topic, tmp_path / "checkpoint", batch_seconds=5)
    keyed = [dict(p, **{KEY: n}) for n, p in enumerate((people * (6000 // len(people) + 1))[:6000])]
    before, during, after = keyed[:2000], keyed[2000:4000], keyed[4000:]

    log = tmp_path / "stream.log"
    proc = started(cmd, log)
    try:
        wait_for_line(log, "in real time", proc)
        send_steadily(kafka, topic, before, 500)
        output_after(kafka, out_topic, {str(v[KEY]) for v in before}, proc, log)
        send_steadily(kafka, topic, during[:1000], 500)  # the kill comes as the last of these are scored
    finally:
        kill_group(proc)
    # what a kill while Spark writes a commit leaves (seen when no batch had been committed: Spark then refused the
    # checkpoint); the restart removes it
    commits = tmp_path / "checkpoint" / "commits"
    commits.mkdir(parents=True, exist_ok=True)  # there from the query's start; a kill before that leaves none
    pending = 1 + max([int(p.name) for p in commits.iterdir() if p.name.isdigit()], default=-1)
    planted = commits / f".{pending}.0b9c1a2e-killed.tmp"
    planted.write_bytes(b"")
    send_steadily(kafka, topic, during[1000:], 500)  # sent while no stream runs

    log2 = tmp_path / "stream-again.log"
    proc = started(cmd, log2)
    try:
        wait_for_line(log2, "in real time", proc)
        send_steadily(kafka, topic, after, 500)
        out = output_after(kafka, out_topic, {str(v[KEY]) for v in keyed}, proc, log2)
    finally:
        proc.send_signal(signal.SIGTERM)
    text = finished(proc, log2)
    assert "stream stopped (SIGTERM)" in text, text[-3000:]
    # the planted file, and any the kill itself left (it may land while Spark writes an entry)
    removed = re.search(rf"removed (\d+) {re.escape(real_time.REMOVED_LEFTOVERS)} .*", text)
    assert removed and int(removed.group(1)) >= 1 and planted.name in removed.group(0), text[-3000:]
    assert not planted.exists()

    twice = {k: v for k, v in out.items() if len(v) > 1}
    print(f"after a kill and a restart: {len(out)} of {len(keyed)} events out, {len(twice)} of them twice or more")
    probability = serving.predicted(serving.PROBABILITY)
    label = serving.predicted(serving.LABEL)
    for records in twice.values():  # sent again, scored the same (in batches of other sizes: float32 rounding)
        assert len({r[1][label] for r in records}) == 1, records
        assert max(r[1][probability] for r in records) - min(r[1][probability] for r in records) <= 1e-5, records
    assert set(out) == {str(v[KEY]) for v in keyed}
