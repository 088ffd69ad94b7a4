"""P18: what a lost executor costs a two-worker training, and what step checkpoints cost.

Each faulty run trains 2 multi_worker_mirrored workers for 3 long epochs; halfway through the
second, the executor of one worker is killed (SIGKILL to its JVM). The driver relaunches the
TF cluster, which resumes from its last checkpoint: the chief's task stays, with its inputs,
and starts its TF process again; the lost worker's task runs again on the free executor
(`cluster.driver.generations`):
  * P18a: seconds from the kill to the relaunch's first finished step (goal 15 s);
  * P18b: steps the relaunch trained again (as of the chief's last heartbeat before the kill),
    with checkpoints every `train.checkpoint_steps` steps (goal: at most that many);
  both beside the same run with checkpoints at epoch ends only (what training did before);
  * P18c: training examples/s with step checkpoints against epoch checkpoints only, no fault.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import threading
import time
from typing import Callable

from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample
from benchmarks.memory import executor_of
from tfos_jobs.contracts.epoch_line import EXAMPLES_PER_SEC, EpochLine
from tfos_jobs.topology import Strategy

NAME = "P18"
MASTER = "local-cluster[3,1,1536]"  # two TF nodes, and a free executor slot for the relaunch
EPOCHS = 3
KILLED = "worker-0"  # the chief's peer; its executor's loss fails the attempt
STEP, EPOCH = "step checkpoints", "epoch checkpoints"


def recovery(bench: Bench) -> None:
    from tfos_jobs.jobs.train.driver import job as train

    sizes = bench.sizes
    base = dataclasses.replace(
        bench.small.train, strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2, epochs=EPOCHS,
        steps_per_epoch=sizes.p18_steps, batch_size=sizes.p18_batch, profile_steps=0, score_test=False,
        max_attempts=2)
    every = base.checkpoint_steps

    def run(name: str, checkpoint_steps: int, fault: bool) -> Callable[[], Sample]:
        def once() -> Sample:
            tr = dataclasses.replace(base, checkpoint_steps=checkpoint_steps,
                                     model_dir=f"{bench.work}/model-p18-{name.replace(' ', '-')}-{fault}")
            killer = Killer(tr.model_dir) if fault else None
            metrics = train.run(bench.spark, dataclasses.replace(bench.small, train=tr), overwrite=True,
                                log=bench.indented, on_epoch=killer.on_epoch if killer else None)
            if killer is None:
                steady = metrics["history"][1:]
                return {"examples_per_sec": statistics.fmean(e[EXAMPLES_PER_SEC] for e in steady)}
            if killer.killed_at is None or not metrics["recoveries"]:
                raise RuntimeError(f"P18 {name}: the executor of {KILLED} was not killed, or no relaunch trained")
            r = metrics["recoveries"][0]
            if r["nodes_restarted"] != [KILLED]:
                raise RuntimeError(f"P18 {name}: nodes started again on a new task: {r['nodes_restarted']}, "
                                   f"not only the killed {KILLED}")
            return {"loss_to_step_seconds": r["resumed_time"] - killer.killed_at, "trained_again": r["trained_again"]}
        return once

    bench.run.sizes[NAME] = (f"2 multi_worker_mirrored workers, {EPOCHS} epochs of {sizes.p18_steps:,} steps of "
                             f"{sizes.p18_batch} examples per worker, on {MASTER}; the executor of {KILLED} killed "
                             f"halfway through epoch 2; step checkpoints every {every} steps (the default)")
    out = bench.repeat(NAME, {
        f"{STEP}, killed": run(STEP, every, True), f"{EPOCH}, killed": run(EPOCH, 0, True),
        STEP: run(STEP, every, False), EPOCH: run(EPOCH, 0, False)},
        warmup=False, repeats=sizes.train_repeats)
    loss = {name: Figure(f"{name}: executor loss to the next training step", "s",
                         out[f"{name}, killed"]["loss_to_step_seconds"]) for name in (STEP, EPOCH)}
    again = {name: Figure(f"{name}: steps trained again", "steps", out[f"{name}, killed"]["trained_again"])
             for name in (STEP, EPOCH)}
    bench.run.results.append(Result(
        "P18a", "seconds from an executor's loss to the next training step, 2 multi_worker_mirrored workers (the "
                "slowest run counts; with epoch checkpoints only in the details)", loss[STEP], None, 15.0, "<=",
        worst=True))
    bench.run.results.append(Result(
        "P18b", f"steps trained again after an executor's loss, checkpoints every {every} steps (the most of any "
                "run counts; with epoch checkpoints only in the details)", again[STEP], None, float(every), "<=",
        worst=True))
    rate = {name: Figure(f"{name}, no fault", "examples/s", out[name]["examples_per_sec"]) for name in (STEP, EPOCH)}
    bench.run.results.append(Result(
        "P18c", f"training examples/s, 2 multi_worker_mirrored workers: checkpoints every {every} steps vs at epoch "
                "ends only", rate[STEP], rate[EPOCH], 0.95, ">="))
    for name in (STEP, EPOCH):
        bench.run.details[f"P18 {name} loss"] = loss[name]
        bench.run.details[f"P18 {name} again"] = again[name]


class Killer:
    """Kills the executor JVM of `KILLED` halfway through epoch 2: once epoch 1's line is shown,
    after half as long again as that epoch took."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        self.killed_at: float | None = None

    def on_epoch(self, line: EpochLine) -> None:
        if line.epoch == 1 and self.killed_at is None:
            threading.Thread(target=self._kill_after, args=(line.seconds / 2,), daemon=True).start()

    def _kill_after(self, seconds: float) -> None:
        time.sleep(seconds)
        records = [os.path.join(top, name) for top, _, names in os.walk(self.model_dir.removeprefix("file:"))
                   for name in names if name == f"{KILLED}.json"]
        if not records:
            return
        with open(records[0], encoding="utf-8") as fh:
            jvm = executor_of(json.load(fh)["pid"])
        self.killed_at = time.time()
        os.kill(jvm, signal.SIGKILL)
