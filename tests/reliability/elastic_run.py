"""Elastic training on a real local-cluster of 2 executors, this process its driver.

    python -m tests.reliability.elastic_run MODE DATASET MODEL_DIR

MODE "steady": 8 epochs of 300 steps of a model whose steps take at least 10 ms each
(`tests.cluster.boom:steady`), so each phase lasts long enough to act in. "demo": the census
demo's own training settings (conf/census.toml). Either way, once an epoch is done, worker-0's
executor is killed through Spark's own API (`SparkContext.killExecutors`: the cluster manager is
told not to replace it, as when a queue takes an executor back), and the run must go on with the
chief alone; once it does, an executor is asked for again (`requestTotalExecutors`), and the run
may grow back to 2 workers. MODE "unbroken": the demo's training without a fault, to compare
with. Prints the run's lines, then `METRICS <metrics.json>` on success."""
from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from tfos_jobs import api, config, session_builder
from tfos_jobs.config import ElasticConfig, ModelConfig, SparkConfig, TrainConfig
from tfos_jobs.topology import Strategy

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 10
EPOCHS = 8  # of the steady model
STEADY, DEMO, UNBROKEN = "steady", "demo", "unbroken"


def wait_for(what: str, ready: Callable[[], bool], running: threading.Thread, timeout: float = 400) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if not running.is_alive():
            raise SystemExit(f"the run ended before {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def settings(mode: str, dataset: str, model_dir: str) -> TrainConfig:
    elastic = ElasticConfig(wait_seconds=WAIT_SECONDS, min_workers=1)
    if mode == STEADY:
        # 300 steps of 64 examples per worker and epoch, each of at least 10 ms, a checkpoint every
        # 100: epochs of 3 s or more, at any size
        return TrainConfig(strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2, batch_size=64,
                           steps_per_epoch=300, epochs=EPOCHS, checkpoint_steps=100, reservation_timeout=120,
                           max_attempts=2, elastic=elastic, dataset=dataset, model_dir=model_dir,
                           model=ModelConfig(kind="tests.cluster.boom:steady"))
    demo = config.load(ROOT / "conf" / "census.toml").train
    return dataclasses.replace(demo, dataset=dataset, model_dir=model_dir, max_attempts=2, tensorboard=False,
                               elastic=elastic if mode == DEMO else demo.elastic)


def main(mode: str, dataset: str, model_dir: str) -> int:
    spark = session_builder.build(SparkConfig(master="local-cluster[2,1,1536]", app_name="tfos-elastic", conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.PYTHONPATH": str(ROOT)}))
    jvm_sc, jvm = spark.sparkContext._jsc.sc(), spark.sparkContext._jvm
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.extend(line.splitlines())

    outcome: dict[str, BaseException] = {}

    def train() -> None:
        try:
            api.train(spark, config=settings(mode, dataset, model_dir), log=log)
        except BaseException as e:  # raised below
            outcome["error"] = e

    running = threading.Thread(target=train, name="train")
    running.start()
    model = Path(model_dir)

    def trained_an_epoch() -> bool:
        progress = model / "progress.jsonl"
        return progress.exists() and progress.read_text().count("\n") >= 1 and any(model.glob("_run/*/nodes/worker-0.json"))

    if mode != UNBROKEN:
        wait_for("the first epoch", trained_an_epoch, running)
        [record] = model.glob("_run/*/nodes/worker-0.json")
        executor = str(json.loads(record.read_text())["executor_id"])
        assert jvm_sc.killExecutors(jvm.PythonUtils.toSeq([executor])), "killExecutors refused"
        log(f"[test] killed executor {executor} (worker-0's); the cluster manager does not replace it")
        wait_for("the run alone", lambda: any("relaunching the TF cluster with 1 worker" in x for x in lines), running)
        assert jvm_sc.requestTotalExecutors(2, 0, jvm.PythonUtils.toScalaMap(jvm.java.util.HashMap())), "refused"
        log("[test] asked the cluster manager for 2 executors in all")
    running.join(900)
    spark.stop()
    if "error" in outcome:
        raise outcome["error"]
    print("METRICS " + (model / "metrics.json").read_text().replace("\n", " "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
