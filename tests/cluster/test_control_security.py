"""The TF cluster's control traffic under attack, on a real local-cluster with a real `tfos train`.

While training runs, every TCP port the driver's Python process and the executors' Python
processes listen on receives a code-executing pickle (what TensorFlowOnSpark's own
reservation server would have run) and garbage. Nothing runs, training finishes as an
unattacked run does, and the driver names the rejected peer. A node holding the wrong
secret cannot register, and the run fails fast saying so."""
from __future__ import annotations

import json
import os
import pickle
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest


from tests.conftest import CENSUS, ROOT, prepared_dataset

BIN = Path(sys.executable).parent
PEOPLE = 6000
SETTINGS = ["train.batch_size=64", "train.epochs=3", "train.steps_per_epoch=300", "train.reservation_timeout=60",
            "spark.master=local-cluster[2,1,1536]", "spark.conf.spark.ui.showConsoleProgress=false",
            "train.tensorboard=false"]


class Exploit:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    return prepared_dataset(spark, tmp_path_factory.mktemp("control"), PEOPLE, 3.0, 11)


def command(dataset: Path, model_dir: Path, *extra: str, entry: list[str] | None = None) -> list[str]:
    sets = [f"train.dataset={dataset}", f"train.model_dir={model_dir}", *SETTINGS, *extra]
    return [*(entry or [str(BIN / "tfos")]), "train", "--config", str(CENSUS), *[a for s in sets for a in ("--set", s)]]


def python_tree(root: int) -> list[int]:
    """`root` and every descendant process that runs this Python (driver, TF nodes, managers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(sys.executable):
                found.append(pid)
        except OSError:
            pass
    return found


def listening_ports(pid: int) -> set[tuple[str, int]]:
    """(address, port) of each TCP socket `pid` listens on, from its socket inodes and
    /proc/net/tcp{,6}; a wildcard address as loopback."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    address, port = cols[1].rsplit(":", 1)
                    ports.add((_address(address), int(port, 16)))
    return ports


def _address(hexed: str) -> str:
    if len(hexed) == 8:  # IPv4, little-endian
        ip = socket.inet_ntoa(bytes.fromhex(hexed)[::-1])
        return "127.0.0.1" if ip == "0.0.0.0" else ip
    raw = b"".join(bytes.fromhex(hexed[i:i + 8])[::-1] for i in range(0, 32, 8))
    ip = socket.inet_ntop(socket.AF_INET6, raw)
    if ip == "::":
        return "127.0.0.1"
    return ip.removeprefix("::ffff:") if ip.startswith("::ffff:") else ip


def attack(address: tuple[str, int], payloads: list[bytes]) -> None:
    for data in payloads:
        try:
            with socket.create_connection(address, timeout=2) as sock:
                sock.sendall(data)
                sock.settimeout(1)
                try:
                    sock.recv(4096)
                except OSError:
                    pass
        except OSError:
            pass


@pytest.fixture(scope="module")
def attacked(dataset, tmp_path_factory):
    """A training run whose every listening port (the driver's, the TF nodes') is sent a pickle
    that would run code, and garbage, as soon as it opens: its output, metrics, model directory,
    the ports attacked per process, and the file the pickle would create."""
    tmp_path = tmp_path_factory.mktemp("attacked")
    marker = tmp_path / "code-ran"
    exploit = pickle.dumps(Exploit(str(marker)))
    payloads = [struct.pack(">I", len(exploit)) + exploit, os.urandom(512),
                struct.pack(">I", len(exploit) + 32) + bytes(32) + exploit]
    model_dir = tmp_path / "attacked"
    ports = ["train.control_ports=39000-39049", "train.tf_ports=39100-39199"]  # firewall-friendly ranges
    proc = subprocess.Popen(command(dataset, model_dir, *ports), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    ports_attacked: dict[int, set[tuple[str, int]]] = {}

    def attacker():
        while proc.poll() is None:
            for pid in python_tree(proc.pid):
                for address in listening_ports(pid) - ports_attacked.get(pid, set()):
                    attack(address, payloads)
                    ports_attacked.setdefault(pid, set()).add(address)
            time.sleep(0.3)

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    out, err = proc.communicate(timeout=900)
    thread.join(10)
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    return {"out": out, "pid": proc.pid, "attacked": ports_attacked, "model_dir": model_dir, "marker": marker,
            "metrics": json.loads((model_dir / "metrics.json").read_text())}


@pytest.mark.slow  # a training under attack, over a minute: `make test-all`; `make test` keeps the wrong secret
def test_pickles_and_garbage_sent_to_every_port_run_nothing(attacked):
    assert not attacked["marker"].exists(), "a message sent to the cluster ran code"
    ports = attacked["attacked"]
    driver_ports = ports.get(attacked["pid"], set())
    node_pids = [pid for pid in ports if pid != attacked["pid"]]
    assert len(driver_ports) >= 2  # the reservation server and PySpark's accumulator server at least
    assert len(node_pids) >= 2, f"only {ports} were attacked: the TF nodes' servers were never reached"
    assert any(39000 <= port < 39050 for _, port in driver_ports), driver_ports  # train.control_ports
    # train.tf_ports: each node's ports (its TF server's, its gradient mesh's while the mesh forms) from its
    # own share, every other port of the range: a process never holds ports of both shares, and both are used
    shares = [{(port - 39100) % 2 for _, port in ports[pid] if 39100 <= port < 39200} for pid in node_pids]
    assert all(len(share) <= 1 for share in shares) and set().union(*shares) == {0, 1}, ports
    assert "control channel: rejected a message from" in attacked["out"]
    m = attacked["metrics"]
    assert m["control"]["rejected_messages"] >= 2 and m["control"]["rejected_from"]
    assert [e["epoch"] for e in m["history"]] == [1, 2, 3] and m["attempts"] == 1 and m["eval"]["auc"] > 0.8
    assert (attacked["model_dir"] / "saved_model" / "saved_model.pb").exists()


@pytest.mark.slow  # a second training run
def test_an_attacked_run_learns_what_a_clean_run_learns(dataset, attacked, tmp_path):
    clean_dir = tmp_path / "clean"
    clean = subprocess.run(command(dataset, clean_dir), capture_output=True, text=True, timeout=900, cwd=ROOT,
                           env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert clean.returncode == 0, clean.stderr[-3000:]
    c, m = json.loads((clean_dir / "metrics.json").read_text()), attacked["metrics"]
    assert [e["epoch"] for e in m["history"]] == [e["epoch"] for e in c["history"]] == [1, 2, 3]
    assert m["attempts"] == c["attempts"] == 1
    assert abs(m["eval"]["auc"] - c["eval"]["auc"]) < 0.02
    assert c["control"] == {"rejected_messages": 0, "rejected_from": []}


def test_a_node_with_the_wrong_secret_cannot_register(dataset, tmp_path):
    model_dir = tmp_path / "model"
    entry = [sys.executable, "-m", "tests.cluster.wrong_secret"]
    started_at = time.time()
    proc = subprocess.run(command(dataset, model_dir, f"spark.conf.spark.executorEnv.PYTHONPATH={ROOT}", entry=entry),
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"TF node worker-0 failed: \S*AuthenticationError", proc.stderr), proc.stderr[-3000:]
    assert "rejected this node: authentication failed" in proc.stderr
    assert "control channel: rejected a message from" in proc.stdout
    assert "attempt 1 of" not in proc.stdout  # a wrong secret is not retried
    assert "within train.reservation_timeout" not in proc.stdout + proc.stderr  # refused at once, not waited out
    assert not (model_dir / "saved_model").exists()
    # the chief's task was cancelled while it waited for the refused node: its files on the
    # executor's disk go with it (TF node workspaces are <tmp>/tfos-<run id>/)
    deadline = time.monotonic() + 15
    left = [1]
    while left and time.monotonic() < deadline:
        left = [p for p in Path(tempfile.gettempdir()).glob("tfos-20*") if p.stat().st_mtime >= started_at]
        time.sleep(0.5)
    assert left == [], left
