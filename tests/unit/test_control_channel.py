"""The control channel between driver and TF nodes: a real server and client over loopback
TCP, no Spark. Nothing a peer sends is decoded before its tag verifies, and nothing is ever
unpickled; a node reports and hands over files through it and can name nothing outside its
run's targets."""
from __future__ import annotations

import json
import os
import pickle
import re
import socket
import struct
import threading
import time

import pytest

from tfos_jobs import control_channel as cc
from tfos_jobs.config import parse_ports
from tfos_jobs.cluster.driver.control_server import ControlServer, control_address
from tfos_jobs.cluster.driver.run_state import RunState
from tfos_jobs.cluster.driver.transfers import Transfers
from tfos_jobs.cluster.node import tfos_cluster
from tfos_jobs.cluster.node.control_client import ControlClient, DriverLink, RemoteError
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.metrics import ChiefResult, NodeRecord, SamplePredictions
from tfos_jobs.progress_log import ProgressLog, parse
from tfos_jobs.storage import Storage

NODE = {"executor_id": 1, "host": "10.0.0.5", "job_name": "worker", "task_index": 0, "port": 40001}


class Exploit:
    """What an attacker sends TensorFlowOnSpark's reservation server: unpickling it runs code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def run(tmp_path):
    storage = Storage(None)
    model = storage.qualify(str(tmp_path / "model"))
    transfers = Transfers(storage, {cc.SAVED_MODEL: f"{model}/saved_model", cc.BACKUP: f"{model}/backup",
                                    cc.LOGS: f"{model}/logs"})
    state = RunState("r1", 2, ProgressLog(storage, f"{model}/progress.jsonl"), transfers)
    yield state
    transfers.close()


@pytest.fixture
def server(run):
    lines: list[str] = []
    srv = ControlServer(cc.new_secret(), run.handle, bind="127.0.0.1", advertise="127.0.0.1", log=lines.append)
    srv.start()
    srv.lines = lines
    srv.run = run
    yield srv
    srv.stop()


def client(srv: ControlServer, secret: bytes | None = None) -> ControlClient:
    return ControlClient(srv.address, srv.secret if secret is None else secret)


def register(node: ControlClient, reservation: dict) -> None:
    node.request(cc.REGISTER, {"data": reservation})


def link(srv: ControlServer, node: str = "chief-0") -> DriverLink:
    return DriverLink(ControlClient(srv.address, srv.secret), {cc.SENDER_NODE: node})


def test_seal_and_open_bind_the_message_to_secret_connection_direction_and_order():
    secret, nonce = cc.new_secret(), cc.new_nonce()
    body = cc.seal(secret, nonce, b"c", 3, {"type": "query"})[4:]
    assert cc.open_body(secret, nonce, b"c", 3, body) == {"type": "query"}
    for args in ((cc.new_secret(), nonce, b"c", 3), (secret, cc.new_nonce(), b"c", 3), (secret, nonce, b"s", 3),
                 (secret, nonce, b"c", 4)):
        with pytest.raises(cc.AuthenticationError):
            cc.open_body(*args, body)
    tampered = body[:-2] + b"1}"
    with pytest.raises(cc.AuthenticationError):
        cc.open_body(secret, nonce, b"c", 3, tampered)
    with pytest.raises(cc.ControlError, match="exceeds"):
        cc.frame_length(struct.pack(">I", cc.MAX_FRAME + 1))
    payload = b"[1, 2]"
    with pytest.raises(cc.ControlError, match="not a JSON object"):
        cc.open_body(secret, nonce, b"c", 0, cc.tag(secret, nonce, b"c", 0, payload) + payload)


def test_nodes_with_the_secret_reserve_and_learn_the_cluster_tfos_builds(server):
    """Two nodes reserve through the channel; TensorFlowOnSpark builds the cluster spec from the reservations, under the
    roles the nodes reserved with."""
    formed: dict[int, dict] = {}

    def node(partition: int, role: str) -> None:
        formed[partition] = tfos_cluster.form(client(server), partition=partition, role=role, index=0,
                                              port=40000 + partition)

    threads = [threading.Thread(target=node, args=(p, r)) for p, r in ((1, "ps"), (0, "chief"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    host = server.run.reservations()[0]["host"]
    assert formed[0] == formed[1] == {"chief": [f"{host}:40000"], "ps": [f"{host}:40001"]}
    assert server.run.reserved() and server.run.remaining() == 0
    assert server.summary() == {"rejected_messages": 0, "rejected_from": []}


def test_a_reservation_keeps_only_what_cluster_specs_are_built_from(server):
    a = client(server)
    assert a.request(cc.CLUSTER) == []
    register(a, {**NODE, "authkey": "manager-key", "addr": "/tmp/pymp-x/listener"})
    assert not server.run.reserved() and server.run.remaining() == 1
    assert [set(r) for r in server.run.reservations()] == [set(cc.NODE_FIELDS)]
    a.close()


def test_a_wrong_secret_is_rejected_counted_and_logged_once_per_peer(server):
    for _ in range(2):
        with pytest.raises(cc.AuthenticationError, match="rejected this node: authentication failed"):
            register(client(server, secret=cc.new_secret()), NODE)
    assert server.run.reservations() == []
    assert server.summary() == {"rejected_messages": 2, "rejected_from": ["127.0.0.1"]}
    assert len(server.lines) == 1 and "rejected a message from 127.0.0.1: authentication failed" in server.lines[0]
    assert client(server).request(cc.CLUSTER) == []  # the server still serves


def test_a_pickle_or_garbage_runs_nothing_and_is_dropped(server, tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Exploit(str(marker)))
    for data in (struct.pack(">I", len(payload)) + payload, os.urandom(300), struct.pack(">I", 2**31) + b"x" * 10):
        with socket.create_connection(server.address, timeout=5) as sock:
            sock.sendall(data)
            received = b""
            while True:  # the server answers with its hello, then a rejection, then closes
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
            assert cc.REJECTED in received
    time.sleep(0.3)
    assert not marker.exists()
    assert server.summary()["rejected_messages"] == 3
    assert client(server).request(cc.CLUSTER) == []


def test_a_reservation_without_its_fields_is_refused(server):
    with pytest.raises(cc.ControlError):
        client(server).request(cc.REGISTER, {"data": {"executor_id": "1", "host": "h"}})
    assert server.run.reservations() == [] and server.summary()["rejected_messages"] == 1


def test_the_server_listens_on_the_driver_address_only():
    srv = ControlServer(cc.new_secret(), lambda kind, message: None, bind="127.0.0.1", advertise="127.0.0.1",
                        ports=parse_ports(""))
    host, port = srv.start()
    try:
        assert srv._listener.getsockname() == ("127.0.0.1", port)
    finally:
        srv.stop()
    assert control_address({"spark.driver.host": "10.1.2.3"}, "") == ("10.1.2.3", "10.1.2.3")
    assert control_address({"spark.driver.host": "10.1.2.3", "spark.driver.bindAddress": "0.0.0.0"}, "") == (
        "0.0.0.0", "10.1.2.3")
    assert control_address({"spark.driver.host": "10.1.2.3"}, "192.168.0.9") == ("192.168.0.9", "192.168.0.9")
    assert parse_ports("") == [0] and parse_ports("9000-9002") == [9000, 9001, 9002]
    with pytest.raises(ValueError):
        parse_ports("9002-9000")


def test_slow_and_idle_peers_do_not_block_others(server):
    idle = socket.create_connection(server.address, timeout=5)
    idle.sendall(struct.pack(">I", 100) + b"x")  # half a frame, then nothing
    done = threading.Event()
    threading.Thread(target=lambda: (register(client(server), NODE), done.set()), daemon=True).start()
    assert done.wait(5)
    idle.close()


def record(role: str, pid: int) -> NodeRecord:
    return NodeRecord(partition=pid - 11, host="h", pid=pid, python="p", cuda_visible_devices="", started=1e9, role=role,
                      index=0, executor_id=str(pid - 11), cluster={}, threads=1)


RESULT = ChiefResult(final={"loss": 0.4, "val_auc": 0.8}, test=None, kept_epoch=2, epochs_run=2, steps_per_epoch=10,
                     gradient_exchange="all_reduce", step_profile=None, anomaly=None,
                     sample=SamplePredictions(rows={"age": [30, 41]}, outputs=[[0.2], [0.7]]))


def test_a_node_reports_what_the_driver_used_to_read_from_shared_files(server):
    chief, worker = link(server, "chief-0"), link(server, "worker-0")
    chief.started(record("chief", 11))
    worker.started(record("worker", 12))
    with pytest.raises(cc.ControlError, match="record"):  # the driver keeps whole records only
        link(server, "worker-1").client.request(cc.STARTED, {cc.SENDER_NODE: "worker-1", "record": {"pid": 13}})
    assert server.run.last_beat() == 0.0
    chief.first_step(0)
    chief.beat(40)
    with pytest.raises(cc.ControlError, match="steps must be a count of steps, got -1"):
        chief.beat(-1)
    chief.beat(20)  # an older beat that arrives late does not move the count back
    assert server.run.steps() == 40 and server.run.first_step()[1] == 0
    first = EpochLine(1, 2, seconds=3.5, eval_seconds=0.5, examples_per_sec=1200.0, time=1e9, metrics={"loss": 0.5})
    chief.progress(first)
    chief.progress(EpochLine(2, 2, seconds=3.0, eval_seconds=0.5, examples_per_sec=1300.0, time=1e9 + 3,
                             metrics={"loss": 0.4}))
    worker.failed("Traceback...\nValueError: bad shard")
    assert worker.status() is None
    chief.result(RESULT)
    chief.done(cc.RUN_OK)
    run = server.run
    assert list(run.records()) == ["chief-0", "worker-0"] and run.records()["worker-0"] == record("worker", 12)
    assert run.last_beat() > 0 and "to_first_step_seconds" not in run.startup()  # not launched by a driver here
    assert run.progress.lines()[0] == first and [line.metrics["loss"] for line in run.progress.lines()] == [0.5, 0.4]
    storage = Storage(None)
    assert [line.epoch for line in ProgressLog(storage, run.progress.path, resume=True).lines()] == [1, 2]
    with pytest.raises(cc.ControlError, match="examples_per_sec"):  # the driver keeps epoch lines only
        chief.client.request(cc.PROGRESS, {cc.SENDER_NODE: "chief-0", "line": {"epoch": 3, "epochs": 2, "loss": 0.3}})
    assert len(run.progress.lines()) == 2
    assert run.errors() == {"worker-0": "Traceback...\nValueError: bad shard"}
    assert run.result() == RESULT
    assert worker.status() == cc.RUN_OK and run.done() == cc.RUN_OK


@pytest.mark.parametrize("result, refused", [
    ({k: v for k, v in RESULT.items() if k != "epochs_run"}, "epochs_run missing"),
    ({**RESULT, "final": {"loss": "0.4"}, "kept_epoch": 2.5}, "final is not dict[str, float], kept_epoch is not int | None"),
    ({**RESULT, "step_profile": {"input_ms": 1.0}}, "step_profile is not StepProfile | None"),
    ({**RESULT, "sample": {}}, "sample is not SamplePredictions"),
    ([0.4], "not a JSON object"),
])
def test_a_malformed_result_is_refused_naming_its_key_and_the_run_keeps_none(server, result, refused):
    """The driver reads the chief's result as the contract says it is (`contracts.metrics.chief_result`),
    never as whatever arrived: what does not fit is refused with the node's error, not a KeyError later."""
    with pytest.raises(cc.ControlError, match=re.escape(f"needs the chief's result: {refused} (")):
        link(server, "chief-0").result(result)
    assert server.run.result() is None
    link(server, "chief-0").result({**RESULT, "test": {"auc": 1}, "unknown": "kept"})  # an int is a float too
    assert server.run.result()["test"] == {"auc": 1}


def test_files_travel_whole_to_their_target_and_back(server, tmp_path):
    export = tmp_path / "node" / "saved_model"
    (export / "variables").mkdir(parents=True)
    big = os.urandom(cc.CHUNK * 2 + 123)  # three chunks
    (export / "variables" / "variables.data-00000-of-00001").write_bytes(big)
    (export / "saved_model.pb").write_bytes(b"graph")
    (export / "empty").write_bytes(b"")
    node = link(server)
    node.publish(cc.SAVED_MODEL, str(export))
    published = tmp_path / "model" / "saved_model"
    assert (published / "variables" / "variables.data-00000-of-00001").read_bytes() == big
    assert (published / "saved_model.pb").read_bytes() == b"graph" and (published / "empty").read_bytes() == b""
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["saved_model"]  # no staging left beside it
    (export / "saved_model.pb").write_bytes(b"graph v2")  # a second publication replaces the first whole
    (export / "empty").unlink()
    node.publish(cc.SAVED_MODEL, str(export))
    assert (published / "saved_model.pb").read_bytes() == b"graph v2" and not (published / "empty").exists()
    fetched = tmp_path / "elsewhere"
    assert node.fetch(cc.SAVED_MODEL, str(fetched)) == 2
    assert (fetched / "variables" / "variables.data-00000-of-00001").read_bytes() == big
    assert node.fetch(cc.BACKUP, str(tmp_path / "nothing")) == 0  # no resume state yet


def test_a_node_can_name_nothing_outside_its_targets(server, tmp_path):
    chunk = cc.encode_chunk(b"x")
    for bad in ("../escape", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(cc.ControlError):
            ControlClient(server.address, server.secret).request(
                cc.PUT, {cc.SENDER_NODE: "chief-0", "target": cc.SAVED_MODEL, "path": bad, "offset": 0, "data": chunk})
    with pytest.raises(cc.ControlError):
        ControlClient(server.address, server.secret).request(
            cc.GET, {cc.SENDER_NODE: "chief-0", "target": "/etc", "path": "passwd", "offset": 0, "length": 10})
    assert not (tmp_path / "escape").exists() and not (tmp_path / "model").exists()
    assert server.summary()["rejected_messages"] == 5


def test_an_upload_that_did_not_arrive_whole_is_not_published_and_the_node_hears_why(server, tmp_path):
    node = ControlClient(server.address, server.secret)
    node.request(cc.PUT, {cc.SENDER_NODE: "chief-0", "target": cc.SAVED_MODEL, "path": "saved_model.pb",
                          "offset": 0, "data": cc.encode_chunk(b"half")})
    with pytest.raises(RemoteError, match="upload of saved_model is incomplete"):
        node.request(cc.PUBLISH, {cc.SENDER_NODE: "chief-0", "target": cc.SAVED_MODEL,
                                  "files": {"saved_model.pb": 8, "variables/variables.index": 10}})
    assert not (tmp_path / "model" / "saved_model").exists()
    assert node.request(cc.STATUS) is None  # the connection stays open after an error the driver reports
    assert server.summary()["rejected_messages"] == 0


# A line as progress.jsonl and metrics.json have always held it: the bookkeeping, then the metrics.
WRITTEN = ('{"epoch": 2, "epochs": 5, "seconds": 4.187, "eval_seconds": 0.412, "examples_per_sec": 21034.5, '
           '"time": 1795000000.25, "loss": 0.3571, "auc": 0.9012, "val_loss": 0.3622, "val_auc": 0.8977}')


def test_an_epoch_line_reads_and_writes_as_it_always_has(tmp_path):
    line = parse(WRITTEN + "\n" + WRITTEN[:40])[0]  # a line cut short ends the file
    assert (line.epoch, line.epochs, line.seconds, line.eval_seconds, line.examples_per_sec, line.time) == (
        2, 5, 4.187, 0.412, 21034.5, 1795000000.25)
    assert line.metrics == {"loss": 0.3571, "auc": 0.9012, "val_loss": 0.3622, "val_auc": 0.8977}
    storage = Storage(None)
    log = ProgressLog(storage, storage.qualify(str(tmp_path / "progress.jsonl")))
    log.add(line)
    assert (tmp_path / "progress.jsonl").read_text() == WRITTEN + "\n"
    older = parse(WRITTEN.replace('"eval_seconds": 0.412, ', ""))  # written before eval_seconds was kept
    assert older[0].eval_seconds == 0.0 and older[0].metrics == line.metrics
    for broken in ('{"epoch": 2, "epochs": 5}', WRITTEN.replace("0.3571", '"low"'), WRITTEN.replace(": 2,", ": 2.0,")):
        with pytest.raises(ValueError):
            EpochLine.from_json(json.loads(broken))
