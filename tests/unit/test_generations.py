"""A node job across attempts (`cluster.driver.generations`): each message reaches the state of
the attempt it names, an earlier attempt's are refused, and the tasks are handed each attempt
once. tests/cluster/test_training.py runs it with real nodes and a killed executor."""
from __future__ import annotations

import pytest

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.driver.generations import Generations
from tfos_jobs.cluster.driver.run_state import RunState, RunStopped
from tfos_jobs.config import TrainConfig
from tfos_jobs.contracts.node_args import Launch, NodeArgs
from tfos_jobs.topology import Strategy

NODES = ["chief-0", "worker-1"]


def launch(run_id: str) -> Launch:
    tr = TrainConfig(strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2)
    return Launch(run_id=run_id, strategy=tr.strategy, nodes=2, num_ps=0, server=("127.0.0.1", 1), relayed=False,
                  tf_ports=[0], local_dir="", inputs=[{}, {}], args=NodeArgs.from_train_config(tr, dataset="/d"),
                  job_id="run-1")


def state(run_id: str) -> RunState:
    return RunState(run_id, 2, progress=None, transfers=None)


def next_for(job: Generations, node: str, after: str, task_attempt: int | None = None) -> dict:
    attempt = task_attempt if task_attempt is not None else (1 if not after else 0)  # a retry, or the first task
    return job.handle(cc.NEXT, {cc.SENDER_NODE: node, "after": after, "task_attempt": attempt})


def test_each_message_reaches_the_state_of_the_attempt_it_names():
    first, second = state("run-1"), state("run-2")
    job = Generations(launch("run-1"), first, NODES)
    job.handle(cc.BEAT, {cc.SENDER_NODE: "chief-0", cc.SENDER_RUN: "run-1", "steps": 40})
    assert first.steps() == 40
    job.begin(launch("run-1").next_attempt("run-2"), second)
    job.handle(cc.BEAT, {cc.SENDER_NODE: "chief-0", cc.SENDER_RUN: "run-2", "steps": 60})
    assert (first.steps(), second.steps()) == (40, 60)
    with pytest.raises(RunStopped, match="attempt run-1 is over"):
        job.handle(cc.BEAT, {cc.SENDER_NODE: "chief-0", cc.SENDER_RUN: "run-1", "steps": 80})
    assert job.handle(cc.STATUS, {cc.SENDER_NODE: "chief-0", cc.SENDER_RUN: "run-1"}) == cc.RUN_FAILED
    assert job.handle(cc.STATUS, {cc.SENDER_NODE: "chief-0", cc.SENDER_RUN: "run-2"}) is None
    with pytest.raises(cc.ControlError, match="must name its attempt"):
        job.handle(cc.BEAT, {cc.SENDER_NODE: "chief-0", "steps": 80})


def test_every_task_is_handed_each_later_attempt_once_and_hears_when_the_job_is_over():
    first = state("run-1")
    job = Generations(launch("run-1"), first, NODES)
    assert next_for(job, "worker-1", "") == {"launch": None, "end": False}  # a retry waits for the next attempt
    first.mark_done(cc.RUN_FAILED)
    assert next_for(job, "chief-0", "run-1") == {"launch": None, "end": False}
    second = state("run-2")
    job.begin(launch("run-1").next_attempt("run-2"), second)
    handed = next_for(job, "worker-1", "")
    assert Launch.from_json(handed["launch"]).run_id == "run-2" and not handed["end"]
    assert Launch.from_json(handed["launch"]).workspace("worker-1") == launch("run-1").workspace("worker-1")
    assert next_for(job, "worker-1", "") == {"launch": None, "end": False}  # once
    assert next_for(job, "chief-0", "run-1")["launch"] is not None
    second.handle(cc.DONE, {cc.SENDER_NODE: "chief-0", "status": cc.RUN_OK})
    assert next_for(job, "worker-1", "run-2") == {"launch": None, "end": True}
    with pytest.raises(cc.ControlError, match="one of this job's nodes"):
        next_for(job, "worker-7", "")
    with pytest.raises(cc.ControlError, match="attempt number"):
        job.handle(cc.NEXT, {cc.SENDER_NODE: "chief-0", "after": ""})


def test_a_failed_task_attempt_counts_against_the_attempt_it_ran_or_was_to_run():
    first = state("run-1")
    job = Generations(launch("run-1"), first, NODES)
    assert job.counts(1, 0)  # worker-1's first task, in the first attempt
    first.mark_done(cc.RUN_FAILED)
    job.begin(launch("run-1").next_attempt("run-2"), state("run-2"))
    assert not job.counts(1, 0)  # its loss, recorded by Spark after the driver moved on: the first attempt's
    assert job.counts(1, 1)  # its retry, failed before it could join
    next_for(job, "worker-1", "", task_attempt=1)
    next_for(job, "chief-0", "run-1", task_attempt=0)
    assert job.counts(1, 1) and job.counts(0, 0)  # both ran the second attempt


def test_a_job_ended_by_the_driver_tells_its_waiting_tasks_so():
    first = state("run-1")
    job = Generations(launch("run-1"), first, NODES)
    first.mark_done(cc.RUN_FAILED)
    job.end()
    assert next_for(job, "chief-0", "run-1") == {"launch": None, "end": True}
