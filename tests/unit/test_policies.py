"""The decisions the cluster code takes, checked without a cluster: which failures a relaunch
can fix, what the user is told, which node gets which role, how many steps an epoch has, how
output files are named, and how a trial's outcome is summarised."""
from __future__ import annotations

import json

import pytest
from pyspark import cloudpickle

from tfos_jobs.config import ModelConfig, TrainConfig
from tfos_jobs.errors import ConfigError
from tfos_jobs.contracts.node_args import Launch, NodeArgs
from tfos_jobs.cluster.driver.failure_policy import failure_message, retriable, task_traceback
from tfos_jobs.data.dataset import stable_name
from tfos_jobs.cluster.node.node import port_share
from tfos_jobs.topology import roles
from tfos_jobs.cluster.node.training import steps_for
from tfos_jobs.contracts.sweep_dir import TrialDir
from tfos_jobs.contracts.trial import TrialStatus
from tfos_jobs.search.trials import summarise, trial_result

from tests.unit.test_search import line

PEER_GONE = "Traceback ...\ntensorflow.python.framework.errors_impl.UnavailableError: failed to connect to all addresses"
CODE_BUG = "Traceback ...\nValueError: could not broadcast input array"


def test_only_failures_of_peers_are_retriable():
    assert retriable([])  # no node wrote an error: an executor was lost
    assert retriable([PEER_GONE, "AbortedError: collective ops aborted"])
    assert not retriable([PEER_GONE, CODE_BUG])  # a code error on any node is not fixed by a relaunch
    assert not retriable([CODE_BUG])
    # the TF server's port was taken between the node's check and TensorFlow's bind
    assert retriable(["Traceback ...\ntensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server"])
    # what Spark recorded for the task of a node whose executor died, and for the task's retry
    assert retriable(["ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason: killed",
                      "RuntimeError: TF node worker-0 was lost with its executor; a TF cluster cannot take a replacement"])
    assert not retriable(["tfos_jobs.control_channel.AuthenticationError: the control server rejected this node"])


def test_the_error_spark_recorded_for_a_task_reads_as_the_python_traceback():
    recorded = ("org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the "
                "Python worker: Traceback (most recent call last):\n  File \"x.py\", line 7, in f\n"
                "ValueError: boom node 1\n SQLSTATE: 38000\n\n\tat org.apache.spark.api.python.Runner(R.scala:1)\n"
                "\tat java.base/java.lang.Thread.run(Thread.java:840)\n")
    text = task_traceback(recorded)
    assert text.splitlines()[-1] == "ValueError: boom node 1" and "\tat " not in text and "SQLSTATE" not in text
    assert failure_message({"worker-0": ("/m/_run/r/nodes/worker-0.error", text)}, None).startswith(
        "TF node worker-0 failed: ValueError: boom node 1")


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


def test_parameter_server_roles_take_the_last_partitions_as_ps():
    assert roles("parameter_server", 4, 1) == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    assert roles("parameter_server", 2, 1) == [("chief", 0), ("ps", 0)]
    assert roles("multi_worker_mirrored", 3, 1) == [("chief", 0), ("worker", 0), ("worker", 1)]  # ps only under PS
    assert TrainConfig(strategy="parameter_server", workers=2, ps=1).nodes() == 4
    assert TrainConfig(strategy="multi_worker_mirrored", workers=3).nodes() == 3
    assert TrainConfig(strategy="local", workers=3).nodes() == 1


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
    return NodeArgs.from_train_config(tr, dataset="hdfs://nn:8020/d")


def test_steps_per_epoch_is_one_pass_over_the_train_split_unless_set():
    assert steps_for(args(batch_size=100), 10_050, 1) == 100
    assert steps_for(args(batch_size=100), 10_050, 2) == 50  # MWMS: a step takes a batch on every worker
    assert steps_for(args(batch_size=100, strategy="parameter_server"), 10_050, 3) == 100  # PS: one worker's batch
    assert steps_for(args(batch_size=100), 50, 4) == 1
    assert steps_for(args(steps_per_epoch=7), 10_050, 2) == 7


def test_node_args_cross_to_the_nodes_as_plain_data_and_come_back_equal():
    model = ModelConfig(kind="mymodels:towers", num_layers=2, params={"towers": [8, 4], "act": "relu"})
    a = args(model=model, strategy="parameter_server", ps=2, epochs=7, learning_rate=0.01)
    data = a.to_dict()
    text = json.dumps(data)  # plain values only
    assert "train" in data and data["train"]["epochs"] == 7
    back = NodeArgs.from_dict(data)
    assert back == a and back.num_ps == 2 and back.train.model.params["towers"] == (8, 4)
    assert NodeArgs.from_dict(json.loads(text)) == a  # JSON lists read back as the config's tuples
    assert args(strategy="multi_worker_mirrored", ps=2).num_ps == 0
    with pytest.raises(ConfigError, match="node args.train.epochs"):
        NodeArgs.from_dict({**data, "train": {**data["train"], "epochs": "7"}})


def test_a_launch_carries_a_pickled_model_function_as_json():
    def model_fn(spec, vocab, stats, model_cfg):
        return model_cfg.num_layers

    a = NodeArgs.from_train_config(TrainConfig(strategy="local"), dataset="file:/d", model_fn=model_fn)
    launch = Launch(run_id="r", strategy="local", nodes=1, num_ps=0, server=("10.0.0.1", 9000), relayed=False,
                    tf_ports=[0], local_dir="", inputs=[{}], args=a)
    back = Launch.from_json(launch.to_json())
    assert back == launch and back.server == ("10.0.0.1", 9000)
    assert cloudpickle.loads(back.args.model_fn)(None, None, None, ModelConfig(num_layers=3)) == 3


def test_output_files_get_names_that_do_not_depend_on_the_job():
    assert stable_name("part-00003-1f2e3d4c-aaaa-bbbb.c000.tfrecord") == "part-00003.tfrecord"
    assert stable_name("part-00003-1f2e3d4c.tfrecord.gz") == "part-00003.tfrecord.gz"
    assert stable_name("_SUCCESS") == "_SUCCESS"


def test_a_trial_is_summarised_from_its_progress():
    lines = [line(1, 2, loss=0.5, val_auc=0.8), line(2, 2, loss=0.4, val_auc=0.85)]
    done = summarise(lines, "val_auc", TrialStatus.COMPLETED, None)
    assert done == {"status": "completed", "value": 0.85, "error": None, "epochs_run": 2,
                    "metrics": {"loss": 0.4, "val_auc": 0.85}}
    missing = summarise(lines, "val_rmse", TrialStatus.COMPLETED, None)
    assert missing["status"] == "failed" and missing["value"] is None
    assert missing["error"] == "metric 'val_rmse' is not among the trial's metrics: loss, val_auc"
    cancelled = trial_result(3, {"lr": 0.1}, lines, "val_rmse", TrialStatus.CANCELLED, "time budget", 0.0)
    assert cancelled["status"] == TrialStatus.CANCELLED == "cancelled" and cancelled["trial"] == 3
    assert json.loads(json.dumps(cancelled))["status"] == "cancelled"
    assert TrialDir.of("hdfs://nn/sweep", 3).progress == "hdfs://nn/sweep/trial-003/progress.jsonl"


def test_the_driver_knows_each_partitions_node_before_it_starts():
    """The driver plans each node's input files by role; the node reserves its place under the same role."""
    assert roles("multi_worker_mirrored", 3, 0) == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert roles("parameter_server", 5, 2) == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)]
    assert roles("local", 1, 0) == [("chief", 0)]


@pytest.mark.parametrize("status", list(TrialStatus))
def test_trial_statuses_print_as_their_value(status):
    assert f"{status}" == status.value == str(status)


def test_each_node_is_sent_the_dataset_files_it_reads():
    from tfos_jobs.data import reader
    from tfos_jobs.contracts.dataset import Manifest, SplitFiles
    from tfos_jobs.data.dataset import DatasetMeta
    from tfos_jobs.cluster.driver import node_inputs
    from tfos_jobs.features.spec import CategoricalFeature, FeatureSpec, Label

    spec = FeatureSpec((CategoricalFeature(name="c"), Label(name="y")))
    files = lambda n: tuple((f"part-{i:05d}.tfrecord", 10) for i in range(n))  # noqa: E731
    manifest = Manifest(1, "0", "", 0.0, "hdfs://nn:8020/ds", {}, spec.fingerprint(), {},
                        {"train": SplitFiles(10, files(5)), "eval": SplitFiles(2, files(2))}, {}, {}, {})
    meta = DatasetMeta("hdfs://nn:8020/ds", spec, {}, manifest, {"c": ["a"]})
    meta_files = {"dataset/_meta/manifest.json", "dataset/_meta/feature_spec.json", "dataset/_meta/stats.json",
                  "dataset/_meta/vocab/c.txt"}
    evals = {"dataset/eval/part-00000.tfrecord", "dataset/eval/part-00001.tfrecord"}
    train = lambda *i: {f"dataset/train/part-{k:05d}.tfrecord" for k in i}  # noqa: E731

    chief, worker = node_inputs.plan(meta, [("chief", 0), ("worker", 0)], "multi_worker_mirrored")
    assert set(chief.values()) == meta_files | evals | train(0, 2, 4)
    assert set(worker.values()) == meta_files | evals | train(1, 3)
    assert sorted(chief) == sorted(f"/ds/{rel[len('dataset/'):]}" for rel in chief.values())  # keyed by path only
    assert node_inputs.qualified(meta, worker)[0].startswith("hdfs://nn:8020/ds/")
    # the same shards the input pipeline opens
    assert reader.shard_files([f"t/{name}" for name, _ in files(5)], 2, 1) == ["t/part-00001.tfrecord",
                                                                               "t/part-00003.tfrecord"]
    ps = node_inputs.plan(meta, [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)], "parameter_server")
    assert set(ps[0].values()) == meta_files | evals  # the coordinator reads no train file
    assert set(ps[1].values()) == set(ps[2].values()) == meta_files | evals | train(0, 1, 2, 3, 4)
    assert set(ps[3].values()) == meta_files  # a parameter server reads nothing
    many = node_inputs.plan(meta, [("chief", 0)] + [("worker", i) for i in range(5)], "multi_worker_mirrored")
    assert all(set(p.values()) >= train(0, 1, 2, 3, 4) for p in many)  # fewer files than workers: records are shared


def test_a_node_writes_its_files_from_chunks_of_any_size_and_refuses_gaps(tmp_path):
    """Files reach a node as chunks (the jar's tfos-node-inputs rows): written as they come, each
    one whole or not at all, and a gap, a short stream or a file not sent is an error."""
    import pyarrow as pa

    from tfos_jobs.cluster.node import inputs

    big, small = bytes(range(256)) * 40, b""  # 10,240 bytes in chunks of 4,096; an empty file
    wanted = {"/ds/train/a.tfrecord": "dataset/train/a.tfrecord", "/ds/_meta/empty": "dataset/_meta/empty"}

    def chunks(path: str, data: bytes, size: int = 4096) -> list[dict]:
        return [{"node": 0, "file": path, "offset": o, "size": len(data), "data": data[o:o + size]}
                for o in range(0, max(len(data), 1), size)]

    def batches(rows: list[dict], per_batch: int = 2) -> list[pa.RecordBatch]:
        return [pa.RecordBatch.from_pylist(rows[i:i + per_batch]) for i in range(0, len(rows), per_batch)]

    rows = chunks("hdfs://nn:8020/ds/train/a.tfrecord", big) + chunks("hdfs://nn:8020/ds/_meta/empty", small)
    assert inputs.receive(batches(rows), wanted, str(tmp_path)) == (2, len(big))
    assert (tmp_path / "dataset/train/a.tfrecord").read_bytes() == big
    assert (tmp_path / "dataset/_meta/empty").read_bytes() == b""
    assert sorted(p.name for p in (tmp_path / "dataset/train").iterdir()) == ["a.tfrecord"]  # no partial file left
    with pytest.raises(ValueError, match="a chunk at offset 8,192 arrived where 4,096 was due"):
        inputs.receive(batches([rows[0], rows[2]]), wanted, str(tmp_path / "gap"))
    assert list((tmp_path / "gap/dataset/train").iterdir()) == []  # the partial file is removed
    with pytest.raises(FileNotFoundError, match="1 input file.s. did not arrive, e.g. dataset/_meta/empty"):
        inputs.receive(batches(rows[:3]), wanted, str(tmp_path / "short"))
    with pytest.raises(ValueError, match="ended at 4,096 of 10,240 bytes"):
        inputs.receive(batches(rows[:1]), wanted, str(tmp_path / "cut"))
    with pytest.raises(ValueError, match="a file it was not sent: hdfs://nn/x"):
        inputs.receive(batches(chunks("hdfs://nn/x", b"1")), wanted, str(tmp_path / "odd"))


def test_a_node_moves_the_files_its_executor_spooled_into_place(tmp_path):
    """With train.node_inputs = "spool" a row names the executor's local copy of a whole file:
    it is moved into place (not copied again), a copy of the wrong size is an error, and a file
    another node of the host already placed is kept."""
    import pyarrow as pa

    from tfos_jobs.cluster.node import inputs

    spool, root = tmp_path / "spool", tmp_path / "node"
    spool.mkdir()
    (spool / "0").write_bytes(b"x" * 5000)
    (spool / "1").write_bytes(b"")
    wanted = {"/ds/train/a.tfrecord": "dataset/train/a.tfrecord", "/ds/_meta/empty": "dataset/_meta/empty"}

    def row(path: str, size: int, local: str) -> dict:
        return {"node": 0, "file": path, "offset": 0, "size": size, "data": b"", "copy": local}

    rows = [row("s3a://b/ds/train/a.tfrecord", 5000, str(spool / "0")), row("s3a://b/ds/_meta/empty", 0, str(spool / "1"))]
    assert inputs.receive([pa.RecordBatch.from_pylist(rows)], wanted, str(root)) == (2, 5000)
    assert (root / "dataset/train/a.tfrecord").read_bytes() == b"x" * 5000
    assert (root / "dataset/_meta/empty").read_bytes() == b""
    assert list(spool.iterdir()) == []  # moved, not copied
    (spool / "0").write_bytes(b"y" * 5000)  # the same file again (another node of this host): kept as it is
    again = [pa.RecordBatch.from_pylist([rows[0]]), pa.RecordBatch.from_pylist([row("s3a://b/ds/_meta/empty", 0, str(spool / "1"))])]
    (spool / "1").write_bytes(b"")
    assert inputs.receive(again, wanted, str(root)) == (2, 5000)
    assert (root / "dataset/train/a.tfrecord").read_bytes() == b"x" * 5000
    (spool / "0").write_bytes(b"z" * 10)
    with pytest.raises(ValueError, match="the executor's copy holds 10 of 5,000 bytes"):
        inputs.receive([pa.RecordBatch.from_pylist([rows[0]])], wanted, str(tmp_path / "short"))
    assert list((tmp_path / "short/dataset/train").iterdir()) == []  # nothing partial left
