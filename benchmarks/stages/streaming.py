"""P15: `tfos stream` scoring the main source's rows (people) from Kafka with the census model the
bench trains (the one P4 serves), each event joined with the 16x regions and events as `tfos
predict` joins them, on a broker the stage starts (scripts/kafka-broker) and stops at its end.

P15a, latency: rows produced as JSON events at a fixed rate (`--p15-rate`) for a fixed time, from a
thread, while the stream runs in this one in the same session; a row's latency is `scored_at -
kafka_timestamp` in the stream's Parquet output: the wait for its trigger, then its micro-batch's
reading, joining and scoring up to the write.

P15b, throughput: the same rows already in a topic; the stream's rows/s over its micro-batches (from
the first one's start to the last one's end, as its progress log records them: the session, the
model's registration and the query's start come before) against the batch UDF's on the same rows,
joined, scored and written to Parquet as `tfos predict` does (its plan built before the clock starts,
as the stream's is). Each micro-batch takes at most a quarter of the rows. P15c: the stream against
its own work as one batch job over the same Kafka records, to show what the streaming engine adds.

`tfos bench --only P15` runs it at full size, after the data and the model it needs; the whole bench
runs it on a quarter of the rows and a third of the time.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks import ROOT, sql_metrics
from benchmarks.context import Bench, Run
from benchmarks.harness import Figure, Result, Sample, fmt
from tfos_jobs.config import Config, StreamConfig
from tfos_jobs.contracts import stream as contract
from tfos_jobs.config.predict import Engine

NAME = "P15"  # its facts in the run, its plot in the report
BROKER = ROOT / "scripts" / "kafka-broker"
TRIGGER_SECONDS = 1.0  # a micro-batch at most every second: an event waits at most that long for its trigger
PARTITIONS = 2  # of each topic: one per core
BATCHES = 4  # P15b: each micro-batch takes at most 1/BATCHES of the rows in the topic (fixed costs amortised)
IDLE_SECONDS = 15.0  # a stream stops once no event came for this long (longer than any micro-batch)
QUERY_WAIT = 300.0  # seconds the producer waits for the stream's query to start
REDUCED_ROWS, REDUCED_TIME = 4, 3  # the whole bench's P15: a quarter of the rows, a third of the time
LATENCY_GOAL = 5.0  # P15a: seconds at p99, a few triggers
BASELINE_UDF = "bench_p15_predict"  # the batch side's function: the stream registers predict.name itself
QUIET: Callable[[str], None] = lambda _: None


@dataclass(frozen=True)
class Plan:
    rows: int  # P15b: rows in the topic
    rate: float  # P15a: events per second
    seconds: float  # P15a: how long they are produced
    events: int  # P15a: rate x seconds, or as many as there are people


def plan(bench: Bench, alone: bool, people: int) -> Plan:
    s = bench.sizes
    rows, seconds = (s.p15_rows, s.p15_seconds) if alone else (s.p15_rows // REDUCED_ROWS, s.p15_seconds / REDUCED_TIME)
    return Plan(max(1, min(rows, people)), s.p15_rate, seconds, max(1, min(int(s.p15_rate * seconds), people)))


def session(bench: Bench) -> SparkSession:
    assert bench.spark is not None  # every stage runs in a session
    return bench.spark


@contextmanager
def broker(directory: str) -> Iterator[str]:
    """A Kafka broker of its own (scripts/kafka-broker) at the address it yields; stopped however
    the block ends."""
    try:
        started = subprocess.run([sys.executable, str(BROKER), "start", "--dir", directory], capture_output=True,
                                 text=True, stdin=subprocess.DEVNULL, timeout=300)
        if started.returncode != 0:
            raise RuntimeError(f"P15: scripts/kafka-broker start failed:\n{started.stderr[-3000:]}")
        yield started.stdout.strip().splitlines()[-1]
    finally:
        stopped = subprocess.run([sys.executable, str(BROKER), "stop", "--dir", directory], capture_output=True,
                                 text=True, stdin=subprocess.DEVNULL, timeout=120)
        if stopped.returncode != 0:
            raise RuntimeError(f"P15: scripts/kafka-broker stop failed:\n{stopped.stderr[-3000:]}")


def ready(bench: Bench) -> None:
    """`--only P15`: the 16x tables and the model the whole bench has made before P15. The model
    trains with the local strategy in this driver: the model P4 serves, without a TF cluster."""
    from tfos_jobs.data import synthetic
    from tfos_jobs.jobs import prepare
    from tfos_jobs.jobs.train.driver import job as train
    from tfos_jobs.topology import Strategy

    spark, cfg, syn = session(bench), bench.big, bench.big.synthetic
    counts = synthetic.generate(spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
    bench.say("  16x: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    prepare.run(spark, cfg, overwrite=True, log=QUIET)
    tr = dataclasses.replace(cfg.train, strategy=Strategy.LOCAL, workers=1, epochs=1, model_dir=cfg.predict.model)
    train.run(spark, dataclasses.replace(cfg, train=tr), overwrite=True, log=bench.indented)


def streaming(bench: Bench, *, alone: bool) -> None:
    from tfos_jobs.data import sources

    spark, cfg = session(bench), bench.big
    main, key = cfg.prepare.main, cfg.features.key
    assert key is not None  # the census spec has one: events are keyed by it
    people = sources.read(spark, main, cfg.sources[main]).orderBy(key.name)
    p = plan(bench, alone, people.count())
    root = f"{bench.work}/p15"
    shutil.rmtree(root, ignore_errors=True)
    tables = {"throughput": f"{root}/rows-throughput", "latency": f"{root}/rows-latency"}
    for name, n in (("throughput", p.rows), ("latency", p.events)):
        people.limit(n).write.parquet(tables[name])
    with broker(f"{root}/kafka") as bootstrap:
        bench.say(f"  Kafka broker at {bootstrap}")
        b = throughput(bench, p, bootstrap, root, tables["throughput"])
        a = latency(bench, p, bootstrap, root, tables["latency"])
    record(bench, p, a, b)


def stream_config(bench: Bench, bootstrap: str, topic: str, run: str, max_offsets: int,
                  engine: Engine = "python") -> Config:
    """The bench's 16x config streaming `topic` into `run`, from its first event, scored by `engine`."""
    st = StreamConfig(bootstrap_servers=bootstrap, topic=topic, starting_offsets="earliest",
                      model=bench.big.predict.model, output=f"{run}/scores", quarantine=f"{run}/quarantine",
                      checkpoint=f"{run}/checkpoint", progress_log=f"{run}/micro_batches.jsonl",
                      trigger_seconds=TRIGGER_SECONDS, max_offsets_per_trigger=max_offsets,
                      stop_when_idle_seconds=IDLE_SECONDS)
    return dataclasses.replace(bench.big, stream=st, predict=dataclasses.replace(bench.big.predict, engine=engine))


def events_of(bench: Bench, path: str) -> DataFrame:
    """The rows at `path` as (key, value) events, in one cached partition: the producer's reading
    of them is one small job, done before the stream needs the cores."""
    from tfos_jobs.jobs.stream.driver import replay

    key = bench.big.features.key
    assert key is not None
    events = replay.as_events(session(bench).read.parquet(path), key.name, None).coalesce(1).cache()
    events.count()
    return events


def micro_batches(progress_log: str) -> list[dict[str, Any]]:
    """The progress log's micro-batches that read events."""
    with open(progress_log, encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    return [line for line in lines if line[contract.INPUT_ROWS]]


def busy_seconds(batches: list[dict[str, Any]]) -> float:
    """From the first micro-batch's start to the last one's end."""
    starts = [dt.datetime.fromisoformat(b[contract.STARTED].replace("Z", "+00:00")).timestamp() for b in batches]
    ends = [s + b[contract.BATCH_MS] / 1000 for s, b in zip(starts, batches)]
    return max(ends) - min(starts)


def run_stream(bench: Bench, cfg: Config, expected: int) -> list[dict[str, Any]]:
    """Run the stream until idle; its micro-batches, every one of the `expected` events scored."""
    from tfos_jobs.jobs.stream.driver import job

    shutil.rmtree(cfg.stream.output.rsplit("/", 1)[0], ignore_errors=True)
    summary = job.run(session(bench), cfg, log=QUIET)
    if summary.events != expected or summary.scored != expected:
        raise RuntimeError(f"P15: the stream read {summary.events:,} and scored {summary.scored:,} of {expected:,} "
                           f"events (quarantined {summary.quarantined}, stopped by {summary.stopped_by})")
    return micro_batches(cfg.stream.progress_log)


def throughput(bench: Bench, p: Plan, bootstrap: str, root: str, rows_path: str) -> dict[str, Any]:
    """P15b: the stream's rows/s over its micro-batches against the batch UDF's, on the same rows."""
    from tfos_jobs.serving import outputs as prediction_output
    from tfos_jobs.serving.scoring import with_predictions
    from tfos_jobs.jobs.stream.driver import replay
    from tfos_jobs.data.assemble import assemble
    from udfs import register

    spark, cfg = session(bench), bench.big
    topic = "p15-throughput"
    replay.create_topic(bootstrap_servers=bootstrap, topic=topic, partitions=PARTITIONS)
    replay.send(events_of(bench, rows_path), bootstrap_servers=bootstrap, topic=topic, rate=0, log=QUIET)
    # Spark shares the cap among the topic's partitions rounding each share down: up to one
    # offset per partition more, or the last quarter would leave a micro-batch of a few rows.
    per_batch = max(1, -(-p.rows // BATCHES)) + PARTITIONS - 1
    pr = cfg.predict
    udf = register(spark, BASELINE_UDF, pr.model, batch_size=pr.batch_size)
    main = cfg.prepare.main
    rows_cfg = dataclasses.replace(cfg, features=udf.spec, sources={
        **cfg.sources, main: dataclasses.replace(cfg.sources[main], path=rows_path, filter=None)})
    runs = [0]
    batches: list[list[dict[str, Any]]] = []
    cores = spark.sparkContext.defaultParallelism

    def streamed(engine: Engine) -> Callable[[], Sample]:
        def once() -> Sample:
            runs[0] += 1
            executions = sql_metrics.Executions(spark)
            found = run_stream(bench, stream_config(bench, bootstrap, topic, f"{root}/stream-{runs[0]}", per_batch,
                                                    engine), p.rows)
            busy = busy_seconds(found)
            if engine == "python":
                batches.append(found)
            # scoring's share of the micro-batches' task time: its task seconds over the cores' seconds while they ran
            return {"rows_per_sec": p.rows / busy, "micro_batches": len(found),
                    "scoring_share": executions.scoring_seconds() / (busy * cores)}
        return once

    def batch() -> Sample:
        # The rows given as the main table: its static sides (regions, the events' aggregates) are
        # then computed once and kept, as the stream keeps them, and neither side times them.
        table, _ = assemble(spark, rows_cfg, for_prediction=True, main=spark.read.parquet(rows_path))
        written = prediction_output.selected(with_predictions(table, udf), table.columns, udf.spec, pr.keep, ())
        started = time.perf_counter()
        written.write.mode("overwrite").parquet(f"{root}/batch")
        return {"rows_per_sec": p.rows / (time.perf_counter() - started)}

    def kafka_batch() -> Sample:
        """The stream's own reading, parsing, joins, scoring and write, as one batch job over the
        same Kafka records: what the streaming engine costs beyond them."""
        from tfos_jobs.jobs.stream.driver import events

        reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        for key, value in events.FETCH.items():
            reader = reader.option(f"kafka.{key}", value)
        parsed = events.parsed(reader.load(), events.schema(spark, rows_cfg, udf.spec), udf.spec)
        table, _ = assemble(spark, rows_cfg, for_prediction=True, main=parsed)
        written = prediction_output.selected(with_predictions(table, udf), table.columns, udf.spec, pr.keep, ())
        started = time.perf_counter()
        written.write.mode("overwrite").parquet(f"{root}/kafka-batch")
        return {"rows_per_sec": p.rows / (time.perf_counter() - started)}

    out = bench.repeat("P15b stream vs batch", {"tfos stream": streamed("python"), "batch UDF": batch,
                                                "batch of the Kafka records": kafka_batch,
                                                "tfos stream, JVM function": streamed("jvm")})
    jvm = out["tfos stream, JVM function"]
    return {"stream": out["tfos stream"]["rows_per_sec"], "batch": out["batch UDF"]["rows_per_sec"],
            "kafka_batch": out["batch of the Kafka records"]["rows_per_sec"],
            "per_batch": per_batch, "micro_batches": out["tfos stream"]["micro_batches"],
            "batch_ms": [b[contract.BATCH_MS] for b in batches[-1]],
            "stream_jvm": jvm["rows_per_sec"], "micro_batches_jvm": jvm["micro_batches"],
            "scoring_share": out["tfos stream"]["scoring_share"], "scoring_share_jvm": jvm["scoring_share"]}


def latency(bench: Bench, p: Plan, bootstrap: str, root: str, rows_path: str) -> dict[str, Any]:
    """P15a: events produced at `p.rate` from a thread once the stream's query runs; each row's
    latency from the stream's output."""
    import pandas as pd

    from tfos_jobs.jobs.stream.driver import job, replay

    spark, topic = session(bench), "p15-latency"
    replay.create_topic(bootstrap_servers=bootstrap, topic=topic, partitions=PARTITIONS)
    events = events_of(bench, rows_path)
    cfg = stream_config(bench, bootstrap, topic, f"{root}/latency", 0)
    stop, sent, failed = threading.Event(), [], []

    def produce() -> None:
        try:
            deadline = time.monotonic() + QUERY_WAIT
            while not any(q.name == job.QUERY_NAME and q.lastProgress for q in spark.streams.active):
                if stop.wait(0.2) or time.monotonic() > deadline:
                    return
            sent.append(replay.send(events, bootstrap_servers=bootstrap, topic=topic, rate=p.rate, log=QUIET))
        except BaseException as e:  # reported by the stream's side
            failed.append(e)

    producer = threading.Thread(target=produce, name="p15-producer", daemon=True)
    producer.start()
    bench.say(f"  P15a: {p.events:,} events at {p.rate:,.0f}/s into {topic}, streamed with a {TRIGGER_SECONDS:g} s "
              "trigger")
    try:
        found = run_stream(bench, cfg, p.events)
    finally:
        stop.set()
        producer.join()
    events.unpersist()
    if failed or sent != [p.events]:
        raise RuntimeError(f"P15: the producer sent {sent} of {p.events:,} events: {failed[0] if failed else ''}")
    arrived = F.unix_micros(contract.EVENT_TIMESTAMP)
    table = spark.read.parquet(cfg.stream.output).select(
        ((F.unix_micros(contract.SCORED_AT) - arrived) / 1e6).alias("latency"), (arrived / 1e6).alias("arrived"))
    frame: pd.DataFrame = table.toPandas()
    frame = frame.sort_values("arrived")
    seconds = frame["latency"]
    sending = (frame["arrived"].iloc[-1] - frame["arrived"].iloc[0]) if len(frame) > 1 else 0.0
    bench.say(f"  P15a: p50 {seconds.quantile(0.5):.2f} s, p99 {seconds.quantile(0.99):.2f} s over {len(frame):,} "
              f"rows in {len(found)} micro-batches")
    return {"p50": float(seconds.quantile(0.5)), "p99": float(seconds.quantile(0.99)), "max": float(seconds.max()),
            "rows": len(frame), "micro_batches": len(found), "sent_rate": len(frame) / sending if sending else 0.0,
            "batch_ms": [b[contract.BATCH_MS] for b in found], "batch_rows": [b[contract.INPUT_ROWS] for b in found],
            "latency": seconds.tolist(), "arrived": (frame["arrived"] - frame["arrived"].iloc[0]).tolist()}


def record(bench: Bench, p: Plan, a: dict[str, Any], b: dict[str, Any]) -> None:
    bench.run.results.append(Result(
        "P15a", f"tfos stream, end-to-end latency of a row (scored_at − kafka_timestamp) at {p.rate:,.0f} events/s "
                f"for {p.seconds:g} s, {TRIGGER_SECONDS:g} s trigger: p99 (p50 {fmt(a['p50'])} s)",
        Figure("p99 latency", "s", [a["p99"]]), None, LATENCY_GOAL, "<="))
    bench.run.results.append(Result(
        "P15b", f"tfos stream rows/s over its micro-batches ({b['per_batch']:,} rows each at most) vs the batch UDF "
                f"(the same {p.rows:,} rows joined, scored, written to Parquet as tfos predict does)",
        Figure("tfos stream", "rows/s", b["stream"]), Figure("batch UDF", "rows/s", b["batch"]), 0.5, ">="))
    bench.run.results.append(Result(
        "P15c", "tfos stream rows/s vs its own reading, parsing, joins, scoring and write run as one batch job over "
                "the same Kafka records: the cost of the streaming engine (micro-batches, checkpoint, commits)",
        Figure("tfos stream", "rows/s", b["stream"]), Figure("batch of the Kafka records", "rows/s", b["kafka_batch"]),
        0.8, ">="))
    bench.run.results.append(Result(
        "P15j", f"tfos stream rows/s scored by the JVM function vs by the Python UDF (the same {p.rows:,} rows in "
                f"micro-batches of {b['per_batch']:,} at most); scoring's share of the micro-batches' task time: "
                f"{fmt(100 * median(b['scoring_share_jvm']))}% vs {fmt(100 * median(b['scoring_share']))}%",
        Figure("tfos stream, JVM function", "rows/s", b["stream_jvm"]),
        Figure("tfos stream, Python UDF", "rows/s", b["stream"]), 1.0, ">="))
    bench.run.facts[NAME] = {"plan": dataclasses.asdict(p), "latency": a, "throughput": b,
                              "trigger": TRIGGER_SECONDS}
    bench.run.sizes["P15 rows (throughput) / events (latency)"] = f"{p.rows:,} / {p.events:,} at {p.rate:,.0f}/s"


def section(run: Run, image: str) -> list[str]:
    """The report's P15 text: how latency and throughput were measured, and the micro-batches."""
    f = run.facts.get(NAME)
    if not f:
        return []
    a, b, p = f["latency"], f["throughput"], f["plan"]
    ms = sorted(a["batch_ms"])
    lines = [
        "## tfos stream (P15)", "",
        f"People of the 16x tables as JSON events on a Kafka topic of {PARTITIONS} partitions (a broker on this "
        "machine), each joined with its region and its events' aggregates as `tfos predict` joins them, scored with the "
        f"prediction UDF and written to Parquet per micro-batch, on `local[2]` in the bench's session.", "",
        f"**Latency (P15a).** {a['rows']:,} events produced at {fmt(p['rate'])}/s ({fmt(a['sent_rate'])}/s as sent) "
        f"for {fmt(p['seconds'])} s from a thread of the driver, while the stream ran with `stream.trigger_seconds` = "
        f"{fmt(f['trigger'])} and no cap per micro-batch. A row's latency is `scored_at − kafka_timestamp`: the "
        "producer's timestamp to the start of its micro-batch's write. "
        f"p50 **{fmt(a['p50'])} s**, p99 **{fmt(a['p99'])} s**, max {fmt(a['max'])} s, over "
        f"{a['micro_batches']} micro-batches of {fmt(min(a['batch_rows']))}–{fmt(max(a['batch_rows']))} events, "
        f"each {fmt(ms[len(ms) // 2] / 1000)} s (median; {fmt(ms[0] / 1000)}–{fmt(ms[-1] / 1000)} s).", "",
        f"**Throughput (P15b).** {p['rows']:,} events in a topic before the stream starts, read at most "
        f"{b['per_batch']:,} per micro-batch ({fmt(sum(b['micro_batches']) / len(b['micro_batches']))} micro-batches "
        "per run). The stream's rows/s divide the rows by the time from its first micro-batch's start to its last "
        "one's end (`timestamp` and `batch_ms` of `stream.progress_log`): the session, the model's registration and "
        "the query's start are not in it. The batch side runs the same join, UDF and Parquet write on the same rows "
        "in one job, reading the rows from Parquet; on both sides the static tables (regions, the events' "
        "aggregates) are computed once and kept, outside the time measured. Stream "
        f"{fmt(median(b['stream']))} rows/s, batch {fmt(median(b['batch']))} rows/s (medians).", "",
        f"**Scored in the JVM (P15j).** The same runs with `predict.engine = \"jvm\"`: "
        f"{fmt(median(b['stream_jvm']))} rows/s. Scoring's share of the micro-batches' task time (Spark's own metrics "
        "of the scoring operator, summed over tasks, over the cores' time from the first micro-batch's start to the "
        f"last one's end): JVM function {fmt(100 * median(b['scoring_share_jvm']))}%, Python UDF "
        f"{fmt(100 * median(b['scoring_share']))}% (medians).", "",
        f"**Where the difference goes (P15c).** The stream's own work run as one batch job over the same Kafka records "
        f"(read with the stream's fetch sizes, parsed from JSON, joined, scored, written): {fmt(median(b['kafka_batch']))} "
        "rows/s. Reading and parsing JSON from Kafka costs what separates it from the Parquet batch; what separates "
        "the stream from it is the streaming engine's own work per micro-batch (offsets and commits in the checkpoint, "
        "planning the micro-batch's query).", "",
        f"![P15]({image})", ""]
    return lines


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def plot(run: Run, path: str) -> str:
    """Left: the latencies' histogram with p50 and p99. Right: each row's latency by when it was sent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = run.facts[NAME]["latency"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.2))
    left.hist(a["latency"], bins=60, color="tab:blue")
    for q, style in (("p50", "--"), ("p99", ":")):
        left.axvline(a[q], color="black", linestyle=style, linewidth=1, label=f"{q} {fmt(a[q])} s")
    left.set_xlabel("seconds, scored_at − kafka_timestamp")
    left.set_ylabel("rows")
    left.set_title(f"P15a: latency of {a['rows']:,} rows", fontsize=10)
    left.legend(fontsize=8)
    right.scatter(a["arrived"], a["latency"], s=2, alpha=0.3, color="tab:blue", rasterized=True)
    right.set_xlabel("seconds since the first event")
    right.set_ylabel("latency, seconds")
    right.set_title(f"each row's latency by its Kafka timestamp ({fmt(run.facts[NAME]['trigger'])} s trigger)",
                    fontsize=10)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
