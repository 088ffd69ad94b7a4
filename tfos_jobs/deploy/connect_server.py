"""`tfos connect-server`: a Spark Connect server for clients of this package, started with what
it needs: the package's jar on its class path (the TFRecord data source, the nodes' inputs, the
driver calls, the relay of the control channel), TensorFlow Java's jars (the prediction function
in the executor JVM), Spark's Kafka connector where it was fetched, and the package's Python for
the executors' workers, with their fixed environment.

    tfos connect-server start --dir DIR [--master local-cluster[2,1,2048]] [--port 15002] [--conf K=V ...]
    tfos connect-server stop --dir DIR

`start` runs Spark's own server (`SparkConnectServer`, through this installation's spark-submit)
in a process group of its own, waits until it answers on its port, prints its URL (sc://HOST:PORT)
and returns; DIR gets server.log and server.pid. `stop` ends the process group (TERM, then KILL
after a grace period). A client then connects with `SparkSession.builder.remote(URL)`, or gives
`tfos` commands `--set spark.remote=URL` (or SPARK_REMOTE=URL).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from tfos_jobs.errors import ConfigError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PORT_SETTING = "spark.connect.grpc.binding.port"
DEFAULT_PORT = 15002  # Spark Connect's own default
LOG, PID = "server.log", "server.pid"
STOP_GRACE = 30.0


def command(*, master: str, port: int, python: str, conf: Mapping[str, str] | None = None) -> list[str]:
    """The spark-submit command line of a server for this package's clients."""
    from tfos_jobs.session_builder import KAFKA_JARS, TFJAVA_JARS, executor_settings, tfrecord_jar
    from tfos_jobs.deploy.submit import spark_submit

    # TensorFlow Java's too: a client's session is isolated on the executors, which load its classes from the jars the
    # server started with and the session's own artifacts, not from jars added to the application later (as a classic
    # session's prediction function in the JVM adds them)
    jars = [str(tfrecord_jar()), *sorted(str(p) for p in KAFKA_JARS.glob("*.jar")),
            *sorted(str(p) for p in TFJAVA_JARS.glob("*.jar"))]
    given = {"spark.executorEnv.PYSPARK_PYTHON": python, **dict(conf or {})}
    settings = {PORT_SETTING: str(port), "spark.pyspark.python": python, "spark.sql.session.timeZone": "UTC",
                **given, **executor_settings(given)}
    return [spark_submit(), "--class", SERVER_CLASS, "--name", "tfos Spark Connect server", "--master", master,
            "--jars", ",".join(jars), *[a for k, v in settings.items() for a in ("--conf", f"{k}={v}")]]


def start(directory: Path, *, master: str, port: int = DEFAULT_PORT, python: str = sys.executable,
          conf: Mapping[str, str] | None = None, timeout: float = 180.0) -> str:
    """Start the server and return its URL once it accepts connections."""
    directory.mkdir(parents=True, exist_ok=True)
    if _running(directory):
        raise ConfigError(f"a server started from {directory} is still running: stop it first")
    env = {**os.environ, "PYSPARK_PYTHON": python, "SPARK_LOG_DIR": str(directory)}
    log = open(directory / LOG, "ab")
    with log:
        proc = subprocess.Popen(command(master=master, port=port, python=python, conf=conf or {}), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=directory,
                                start_new_session=True)
    (directory / PID).write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"the Spark Connect server exited with {proc.returncode}: {_tail(directory / LOG)}")
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return f"sc://127.0.0.1:{port}"
        time.sleep(0.5)
    stop(directory)
    raise ConfigError(f"the Spark Connect server did not answer on port {port} within {timeout:.0f} s: "
                      f"{_tail(directory / LOG)}")


def stop(directory: Path, grace: float = STOP_GRACE) -> bool:
    """End the server started from `directory` and everything in its process group; False when none was running."""
    pid = _running(directory)
    if pid is None:
        return False
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _group_alive(pid):
        time.sleep(0.2)
    _signal(pid, signal.SIGKILL)
    (directory / PID).unlink(missing_ok=True)
    return True


def _running(directory: Path) -> int | None:
    try:
        pid = int((directory / PID).read_text())
    except (OSError, ValueError):
        return None
    return pid if _group_alive(pid) else None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _signal(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def main(action: str, directory: Path, *, master: str, port: int, conf: Sequence[str]) -> int:
    """`tfos connect-server ACTION`: prints the URL a started server answers on."""
    try:
        if action == "start":
            print(start(directory, master=master, port=port, conf=parse_conf(conf)))
        elif not stop(directory):
            print(f"no Spark Connect server started from {directory} is running")
        return 0
    except ConfigError as e:
        print(f"tfos connect-server: error: {e}", file=sys.stderr)
        return 2


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    """`--conf K=V` arguments as settings; a pair without `=` is refused, naming it."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--conf {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out
