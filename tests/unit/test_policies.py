"""The decisions the cluster code takes, checked without a cluster: which failures a relaunch
can fix, what the user is told, which node gets which role, how many steps an epoch has, how
output files are named, and how a trial's outcome is summarised."""
from __future__ import annotations

import json

import pytest

from tfos_jobs.config import ModelConfig, TrainConfig, node_count
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.run_dir import RunDir
from tfos_jobs.driver.failure_policy import failure_message, retriable
from tfos_jobs.driver.prepare import stable_name
from tfos_jobs.executor.node import assign_role, port_share
from tfos_jobs.executor.training import steps_for
from tfos_jobs.search.trials import TrialDir, TrialStatus, summarise, trial_result

PEER_GONE = "Traceback ...\ntensorflow.python.framework.errors_impl.UnavailableError: failed to connect to all addresses"
CODE_BUG = "Traceback ...\nValueError: could not broadcast input array"


def test_only_failures_of_peers_are_retriable():
    assert retriable([])  # no node wrote an error: an executor was lost
    assert retriable([PEER_GONE, "AbortedError: collective ops aborted"])
    assert not retriable([PEER_GONE, CODE_BUG])  # a code error on any node is not fixed by a relaunch
    assert not retriable([CODE_BUG])
    # the TF server's port was taken between the node's check and TensorFlow's bind
    assert retriable(["Traceback ...\ntensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server"])


def test_the_failure_message_names_each_failed_node_its_error_and_its_traceback_file():
    errors = {"worker-1": ("/r/nodes/worker-1.error", CODE_BUG + "\n\n"), "ps-0": ("/r/nodes/ps-0.error", "")}
    assert failure_message(errors, RuntimeError("ignored when nodes reported")) == (
        "TF node worker-1 failed: ValueError: could not broadcast input array\n"
        "  full traceback: /r/nodes/worker-1.error\n"
        "TF node ps-0 failed: (no message)\n  full traceback: /r/nodes/ps-0.error")
    spark = RuntimeError("Job aborted\norg.apache.spark.api.python.PythonException: ImportError: no module x\n  at ...")
    assert failure_message({}, spark) == "a TF node task failed: org.apache.spark.api.python.PythonException: " \
                                         "ImportError: no module x"
    assert failure_message({}, None) == "a TF node task failed (see the executor logs)"


def test_parameter_server_roles_take_the_last_workers_as_ps():
    cluster = {"chief": ["h:1"], "worker": ["h:2", "h:3", "h:4"]}
    ps_cluster = {"chief": ["h:1"], "ps": ["h:4"], "worker": ["h:2", "h:3"]}
    assert assign_role("parameter_server", 1, "chief", 0, cluster) == ("chief", 0, ps_cluster)
    assert assign_role("parameter_server", 1, "worker", 1, cluster) == ("worker", 1, ps_cluster)
    assert assign_role("parameter_server", 1, "worker", 2, cluster) == ("ps", 0, ps_cluster)
    assert assign_role("multi_worker_mirrored", 0, "worker", 2, cluster) == ("worker", 2, cluster)
    assert node_count(TrainConfig(strategy="parameter_server", workers=2, ps=1)) == 4
    assert node_count(TrainConfig(strategy="multi_worker_mirrored", workers=3)) == 3


def test_the_nodes_of_a_run_take_tf_ports_from_disjoint_shares():
    """Two nodes on one host each find a free port, then bind it moments later: from one
    shared range both could find the same port free, and the second TF server would fail."""
    ports = list(range(39100, 39110))
    shares = [port_share(ports, node, 4) for node in range(4)]
    assert shares[0] == [39100, 39104, 39108] and shares[3] == [39103, 39107]
    assert sorted(p for share in shares for p in share) == ports
    assert port_share([39100, 39101], 0, 2) == [39100] and port_share([39100, 39101], 1, 2) == [39101]


def args(**changes) -> NodeArgs:
    tr = TrainConfig(**changes)
    return NodeArgs.from_train_config(tr, dataset="/d", model_dir="/m", run_dir="/m/_run/1")


def test_steps_per_epoch_is_one_pass_over_the_train_split_unless_set():
    assert steps_for(args(batch_size=100), 10_050, 1) == 100
    assert steps_for(args(batch_size=100), 10_050, 2) == 50  # MWMS: a step takes a batch on every worker
    assert steps_for(args(batch_size=100, strategy="parameter_server"), 10_050, 3) == 100  # PS: one worker's batch
    assert steps_for(args(batch_size=100), 50, 4) == 1
    assert steps_for(args(steps_per_epoch=7), 10_050, 2) == 7


def test_node_args_cross_to_the_nodes_as_plain_data_and_come_back_equal():
    a = args(model=ModelConfig(num_layers=2), strategy="parameter_server", ps=2)
    data = a.to_dict()
    assert json.loads(json.dumps(data)) == data  # plain values only
    assert NodeArgs.from_dict(data) == a and a.num_ps == 2 and a.model.num_layers == 2
    assert args(strategy="multi_worker_mirrored", ps=2).num_ps == 0


def test_output_files_get_names_that_do_not_depend_on_the_job():
    assert stable_name("part-00003-1f2e3d4c-aaaa-bbbb.c000.tfrecord") == "part-00003.tfrecord"
    assert stable_name("part-00003-1f2e3d4c.tfrecord.gz") == "part-00003.tfrecord.gz"
    assert stable_name("_SUCCESS") == "_SUCCESS"


def test_a_trial_is_summarised_from_its_progress(tmp_path):
    trial = TrialDir.of(str(tmp_path), 3)
    (tmp_path / "trial-003").mkdir()
    lines = [{"epoch": 1, "epochs": 2, "loss": 0.5, "val_auc": 0.8, "seconds": 1.0, "time": 1.0},
             {"epoch": 2, "epochs": 2, "loss": 0.4, "val_auc": 0.85, "seconds": 1.0, "time": 2.0}]
    (tmp_path / "trial-003" / "progress.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = summarise(trial, "val_auc", TrialStatus.COMPLETED, None)
    assert done == {"status": "completed", "value": 0.85, "error": None, "epochs_run": 2,
                    "metrics": {"loss": 0.4, "val_auc": 0.85}}
    missing = summarise(trial, "val_rmse", TrialStatus.COMPLETED, None)
    assert missing["status"] == "failed" and missing["value"] is None
    assert missing["error"] == "metric 'val_rmse' is not among the trial's metrics: loss, val_auc"
    cancelled = trial_result(3, {"lr": 0.1}, trial, "val_rmse", TrialStatus.CANCELLED, "time budget", 0.0)
    assert cancelled["status"] == TrialStatus.CANCELLED == "cancelled" and cancelled["trial"] == 3
    assert json.loads(json.dumps(cancelled))["status"] == "cancelled"


def test_a_run_directory_records_nodes_and_their_fate(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    run.write_node("worker-1", {"partition": 2})
    run.write_node("chief-0", {"partition": 0})
    run.write_error("worker-1", CODE_BUG)
    run.mark_lost("worker-0")
    assert list(run.node_records()) == ["chief-0", "worker-1"]
    assert run.node_of_partition(2) == "worker-1" and run.node_of_partition(5) is None
    assert run.node_errors() == {"worker-1": (run.error_file("worker-1"), CODE_BUG)}
    assert run.lost_nodes() == ["worker-0"] and run.role_of("worker-0") == "worker"
    assert run.done() is None
    run.mark_done("ok")
    assert run.done() == "ok"


@pytest.mark.parametrize("status", list(TrialStatus))
def test_trial_statuses_print_as_their_value(status):
    assert f"{status}" == status.value == str(status)
