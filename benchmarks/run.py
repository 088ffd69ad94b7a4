"""The benchmark run: generate the data, then measure each stage against its baseline.

Three Spark sessions, one after the other, in this one process:
  1. `local[2]`: generate the 1x and 16x data sets, prepare both (P5), cut sensor windows at two
     sizes (P10) and from a wide table against a narrow one (P17), prepare, train and score a
     table with a text column (P19; alone, `--only P19`), write the prepared
     records three ways (P1, P2), and read them with tf.data in this driver (input pipeline);
  2. `local-cluster[4,1,MB]`: TFoS needs one executor per TF node; the `local` baseline
     trains in this driver while the executors idle, against TF clusters of 1, 2 and 3
     multi_worker_mirrored workers and a parameter-server cluster, all on the same global
     batch (P3, P6, P7, P8, scaling; alone, `--only P6`, after the 1x data set);
  3. `local[2]` again, with HiveServer2's settings: the SQL UDF against the in-process model
     call (P4), Spark's predict_batch_udf (P9) and MLflow's spark_udf (P12), SQL at 1x and 16x
     (P5), and the aggregate query through JDBC against in-process (P13);
     then `tfos stream` from a Kafka broker of its own: latency and throughput against the batch
     UDF (P15, at a reduced size; alone, `--only P15`, at full size after the data and model it needs);
  4. `local-cluster[2,1,MB]`: prepare, train and predict at 1x and 100x the people (P14), which
     can also run alone (`--only P14`);
  5. `local-cluster[2,1,1024]`: a TF node's input files, at 1 GiB of executor heap: the chunk path
     against the whole-file one, and training on 1.5 GB files against 50 MB ones (P16; alone:
     `--only P16`, after the data it needs);
  6. `local-cluster[3,1,1536]`: an executor killed in a two-worker training, with step checkpoints
     and with epoch checkpoints only, and what step checkpoints cost (P18; alone: `--only P18`).
Every figure of one comparison comes from the same session, alternating repeat by repeat.
"""
from __future__ import annotations

from typing import Callable

from benchmarks.context import Bench, Run
from benchmarks.stages import (data, hundredfold, node_inputs, recovery, serving, sql_endpoint, streaming, texts,
                               training, writes)
from tfos_jobs.jobs.serve import sql_server


P14 = "P14 100x the people"
P15 = "P15 tfos stream"
P16 = "P16 node inputs at any file size"
P17 = "P17 wide sensor tables"
P18 = "P18 a lost executor"
P19 = "P19 a text column"
TRAINING = "P3 P6 P7 P8 training and scaling"
P4J = "P4j P9j the prediction function in the executor JVM"


def run_all(bench: Bench, only: str | None = None) -> Run:
    if only == "P14":
        try:
            bench.session(bench.p14_master, hundredfold.SESSION_CONF)
            bench.stage(P14, lambda: hundredfold.hundredfold(bench))
        finally:
            bench.stop()
        return bench.run
    if only == "P15":
        try:
            bench.session(bench.spark_master)
            bench.stage("P15 data and model", lambda: streaming.ready(bench))
            bench.stage(P15, lambda: streaming.streaming(bench, alone=True))
        finally:
            bench.stop()
        return bench.run
    if only == "P4j":
        try:
            bench.session(bench.spark_master)
            bench.stage("P4j data and model", lambda: streaming.ready(bench))
            bench.stage(P4J, lambda: serving.jvm_alone(bench))
        finally:
            bench.stop()
        return bench.run
    if only == "P16":
        return _after_data(bench, only, ("1x", "16x"), node_inputs.MASTER, node_inputs.SESSION_CONF, P16,
                           lambda: node_inputs.node_inputs(bench))
    if only == "P6":
        return _after_data(bench, only, ("1x",), bench.tfos_master, None, TRAINING, lambda: training.training(bench))
    if only == "P18":
        return _after_data(bench, only, ("1x",), recovery.MASTER, None, P18, lambda: recovery.recovery(bench))
    if only in ("P17", "P19"):  # each makes its own data
        alone = {"P17": (P17, lambda: data.wide_tables(bench)), "P19": (P19, lambda: texts.texts(bench))}
        try:
            bench.session(bench.spark_master)
            bench.stage(*alone[only])
        finally:
            bench.stop()
        return bench.run
    s = bench.sizes
    bench.run.sizes["people (1x / 16x)"] = f"{s.people:,} / {s.big_people:,}"
    bench.run.sizes["events per person"] = f"{s.events_per_person:g}"
    bench.run.sizes["repeats per figure"] = f"{s.repeats}, training {s.train_repeats}, P4 and P9 {s.serving_repeats}" + (
        " (after one unrecorded warm-up run of each variant; none for training, where each TFoS run's "
        "start-up is a P6 sample)" if s.warmup else "")
    try:
        bench.session(bench.spark_master)
        bench.stage("generate", lambda: data.generate(bench))
        bench.stage("P5 prepare at 1x and 16x", lambda: data.prepare_scaling(bench))
        bench.stage("P10 sensor windows at 1x and 16x", lambda: data.windowing_scaling(bench))
        bench.stage(P17, lambda: data.wide_tables(bench))
        bench.stage(P19, lambda: texts.texts(bench))
        bench.stage("P1 P2 record writes", lambda: writes.writes(bench))
        bench.stage("input pipeline", lambda: writes.input_pipeline(bench))
        bench.session(bench.tfos_master)
        bench.stage(TRAINING, lambda: training.training(bench))
        if bench.remote:
            bench.stage("P11 training from a Hadoop filesystem", lambda: training.remote_training(bench))
        served = sql_endpoint.endpoint_config()
        bench.session(bench.spark_master, sql_server.session_conf(served, bench.spark_conf))  # P13's server
        bench.stage("P4 P5 P9 P12 serving", lambda: serving.serving(bench))
        bench.stage("tfos predict vs a Parquet write", lambda: serving.predict_vs_write(bench))
        bench.stage("P13 SQL through JDBC", lambda: sql_endpoint.through_jdbc(bench, served))
        bench.stage(P15, lambda: streaming.streaming(bench, alone=False))
        bench.session(bench.p14_master, hundredfold.SESSION_CONF)
        bench.stage(P14, lambda: hundredfold.hundredfold(bench))
        bench.session(node_inputs.MASTER, node_inputs.SESSION_CONF)
        bench.stage(P16, lambda: node_inputs.node_inputs(bench))
        bench.session(recovery.MASTER)
        bench.stage(P18, lambda: recovery.recovery(bench))
    finally:
        bench.stop()
    bench.run.results.sort(key=lambda r: r.id)
    return bench.run


def _after_data(bench: Bench, only: str, scales: tuple[str, ...], master: str, conf: dict[str, str] | None, stage: str,
                measure: Callable[[], None]) -> Run:
    """One stage alone, after the data sets it needs (generated and prepared at `scales`), in a
    session of its own on `master`."""
    try:
        bench.session(bench.spark_master)
        bench.stage("generate", lambda: data.generate(bench, scales=scales))
        bench.stage(f"{only} data", lambda: data.prepare_once(bench, scales=scales))
        bench.session(master, conf)
        bench.stage(stage, measure)
    finally:
        bench.stop()
    return bench.run
