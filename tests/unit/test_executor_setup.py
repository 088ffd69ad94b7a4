"""What the package sets up on every executor it starts: the Python workers' daemon that imports
the installed pyspark ahead of Spark's zip (`python_daemon`), the warm-up plugin after the
user's own plugins, and a TF node's wait for the peers its strategy connects to (`cluster.node.peers`)."""
from __future__ import annotations

import socket
import threading
import time
import zipfile
from pathlib import Path

from tfos_jobs import session_builder
from tfos_jobs import python_daemon
from tfos_jobs.cluster.node import peers
from tfos_jobs.deploy.connect_server import command


def _installed(root: Path, version: str) -> str:
    (root / "pyspark").mkdir(parents=True)
    (root / "pyspark" / "__init__.py").write_text("")
    (root / "pyspark" / "version.py").write_text(f'__version__: str = "{version}"\n')
    return str(root)


def _zips(root: Path, version: str) -> list[str]:
    root.mkdir(parents=True)
    with zipfile.ZipFile(root / "pyspark.zip", "w") as z:
        z.writestr("pyspark/__init__.py", "")
        z.writestr("pyspark/version.py", f'__version__: str = "{version}"\n')
    with zipfile.ZipFile(root / "py4j-0.10.9.9-src.zip", "w") as z:
        z.writestr("py4j/__init__.py", "")
    return [str(root / "pyspark.zip"), str(root / "py4j-0.10.9.9-src.zip")]


def test_the_installed_pyspark_goes_ahead_of_sparks_zips_of_the_same_version(tmp_path):
    zips = _zips(tmp_path / "spark" / "python" / "lib", "4.3.0")
    installed = _installed(tmp_path / "site-packages", "4.3.0")
    shipped = str(tmp_path / "files" / "model.zip")  # a user's --py-files zip keeps its place
    assert python_daemon.installed_first([*zips, shipped, installed]) == [shipped, installed, *zips]


def test_another_pyspark_version_or_none_leaves_sparks_path_as_it_is(tmp_path):
    zips = _zips(tmp_path / "spark" / "python" / "lib", "4.3.0")
    other = _installed(tmp_path / "venv", "4.2.0")
    assert python_daemon.installed_first([*zips, other]) == [*zips, other]
    assert python_daemon.installed_first([*zips, str(tmp_path / "empty")]) == [*zips, str(tmp_path / "empty")]
    installed = _installed(tmp_path / "site-packages", "4.3.0")
    assert python_daemon.installed_first([installed, "/x/y"]) == [installed, "/x/y"]  # no zip at all


def test_a_session_of_the_package_sets_the_daemon_and_the_warm_up_after_the_users_plugins():
    ours = session_builder.executor_settings()
    assert ours[python_daemon.SETTING] == python_daemon.MODULE
    assert ours[session_builder.PLUGINS] == session_builder.WARM_UP_PLUGIN
    assert ours["spark.executorEnv.TF_USE_LEGACY_KERAS"] == "1"
    given = session_builder.executor_settings({session_builder.PLUGINS: "com.nvidia.spark.SQLPlugin, x.Y",
                                       python_daemon.SETTING: "my.daemon"},
                                      {session_builder.PLUGINS: "x.Y,tfos.spark.cluster.WarmUpPlugin"})
    assert given[session_builder.PLUGINS] == "com.nvidia.spark.SQLPlugin,x.Y,tfos.spark.cluster.WarmUpPlugin"
    assert given[python_daemon.SETTING] == "my.daemon"  # the user's own daemon wins


def test_the_connect_server_gets_the_same_executor_settings():
    line = command(master="local-cluster[2,1,1024]", port=15099, python="/opt/py/bin/python",
                   conf={session_builder.PLUGINS: "x.Y"})
    settings = dict(line[i + 1].split("=", 1) for i, arg in enumerate(line) if arg == "--conf")
    assert settings[python_daemon.SETTING] == python_daemon.MODULE
    assert settings[session_builder.PLUGINS] == f"x.Y,{session_builder.WARM_UP_PLUGIN}"
    assert settings["spark.executorEnv.PYSPARK_PYTHON"] == "/opt/py/bin/python"
    # its clients' sessions are isolated on the executors: TensorFlow Java's jars come with the server's own
    jars = line[line.index("--jars") + 1].split(",")
    assert jars[0] == str(session_builder.tfrecord_jar())
    tfjava = sorted(str(p) for p in session_builder.TFJAVA_JARS.glob("*.jar"))
    assert tfjava and all(j in jars for j in tfjava)


def test_each_node_waits_for_the_servers_its_strategy_connects_to():
    cluster = {"chief": ["h0:1"], "worker": ["h1:2", "h2:3"], "ps": ["h3:4"]}
    mwms, ps = "multi_worker_mirrored", "parameter_server"
    assert peers.servers_to_wait_for(mwms, {"cluster": cluster, "task": {"type": "worker", "index": 0}}) == ["h0:1"]
    assert peers.servers_to_wait_for(mwms, {"cluster": cluster, "task": {"type": "chief", "index": 0}}) == []
    assert peers.servers_to_wait_for(ps, {"cluster": cluster, "task": {"type": "chief", "index": 0}}) == [
        "h1:2", "h2:3", "h3:4"]
    assert peers.servers_to_wait_for(ps, {"cluster": cluster, "task": {"type": "worker", "index": 1}}) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_wait_ends_when_a_late_server_listens_and_gives_up_on_one_that_never_does():
    port = _free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening = threading.Event()

    def listen_late() -> None:
        time.sleep(0.3)
        server.bind(("127.0.0.1", port))
        server.listen()
        listening.set()

    thread = threading.Thread(target=listen_late)
    thread.start()
    try:
        assert peers.wait_listening([f"127.0.0.1:{port}"], timeout=60) == []
        assert listening.is_set()
    finally:
        thread.join()
        server.close()
    silent = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    assert peers.wait_listening([silent], timeout=0.2) == [silent]
    assert time.monotonic() - started < 30
