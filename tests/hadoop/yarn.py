"""A real YARN for tests: Hadoop's MiniYARNCluster (a ResourceManager and one NodeManager, FIFO
scheduler, vmem/pmem checks off) over a MiniDFSCluster, in one JVM (tests/hadoop/minidfs.py), with
a HADOOP_CONF_DIR for spark-submit; jobs go to it through `tfos submit --master yarn`.

    with YarnCluster(tmp_path / "yarn") as yarn:
        archive = yarn.upload_public(packed, "/envs")  # on HDFS, readable by all: YARN caches it once
        proc = yarn.submit(["train", "--config", CONF], deploy_mode="cluster", env_archive=archive)
        yarn.applications()                          # the ResourceManager's view of every application
        yarn.container_pids(app_id)                  # container id -> the executor JVM's pid

Containers run as processes of this machine under the NodeManager's directories (BASE/target/...),
each in a session of its own; `stop()` kills what is left of them (a reaper does it if the test
process dies), then the clusters. Every container localizes its files into its own directory:
executors share no working directory with the driver or each other.

Public resources (readable by everyone on HDFS) are localized once per NodeManager and shared by
later applications: the venv archive and Spark's jars (spark.yarn.archive) are uploaded that way.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Sequence
from xml.etree import ElementTree

from tests.hadoop import support
from tests.hadoop.minidfs import MiniDFS

CONTAINER = re.compile(r"container_\d+_\d+_\d+_\d+")


class YarnCluster:
    """Starts on `start()` (or `with`); `stop()` ends every container and both clusters.

    hdfs        hdfs://127.0.0.1:PORT
    conf_dir    HADOOP_CONF_DIR (core-site, hdfs-site, yarn-site)
    executor_conf  spark-submit options for `executors` executors of one core and `executor_memory`
    """

    def __init__(self, base_dir: Path | str, nodemanager_mb: int = 8192, executors: int = 2,
                 executor_memory: str = "1g", start_timeout: float = 180):
        self.base_dir = Path(base_dir).resolve()
        self.executors = executors
        self.executor_memory = executor_memory
        self.dfs = MiniDFS(self.base_dir, yarn=True, nodemanager_mb=nodemanager_mb, start_timeout=start_timeout)
        self._reaper: support.Reaper | None = None
        self.spark_jars = ""  # spark.yarn.archive, on HDFS

    # ---- life cycle
    def start(self) -> "YarnCluster":
        self._reaper = support.Reaper([sys.executable, "-m", "tests.hadoop.yarn", "--reap", str(self.base_dir)],
                                      self.base_dir / "reaper.log")
        try:
            self.dfs.start()
            self.spark_jars = self._upload_spark_jars()
        except BaseException:
            self.stop()
            raise
        return self

    def _upload_spark_jars(self) -> str:
        """Spark's jars as one zip on HDFS for spark.yarn.archive, as clusters keep them: without it
        every submission zips and uploads the 400 MB again and every container unpacks its own copy."""
        local = self.base_dir / "spark-jars.zip"
        with zipfile.ZipFile(local, "w", zipfile.ZIP_STORED) as z:
            for jar in sorted(support.pyspark_jars_dir().glob("*.jar")):
                z.write(jar, jar.name)
        remote = self.upload_public(local, "/envs")
        local.unlink()
        return remote

    def stop(self) -> None:
        reap(self.base_dir)  # the containers first: they are not the JVM's children once started
        self.dfs.stop()
        reap(self.base_dir)  # and what started while the JVM went down
        if self._reaper:
            self._reaper.disarm()
            self._reaper = None

    def __enter__(self) -> "YarnCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def hdfs(self) -> str:
        assert self.dfs.url, "not started"
        return self.dfs.url

    @property
    def conf_dir(self) -> Path:
        return self.dfs.conf_dir

    def path(self, p: str) -> str:
        return self.dfs.path(p)

    # ---- submitting
    @property
    def executor_conf(self) -> list[str]:
        return ["--num-executors", str(self.executors), "--executor-cores", "1",
                "--executor-memory", self.executor_memory, "--conf", "spark.ui.showConsoleProgress=false"]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {**os.environ, "HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir),
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        for key in ("SPARK_HOME", "HADOOP_USER_NAME"):
            env.pop(key, None)
        return {**env, **(extra or {})}

    def submit(self, args: Sequence[str | Path], *, deploy_mode: str = "client", env_archive: str | None = None,
               options: Sequence[str] = (), timeout: float = 900, check: bool = True,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
        """`tfos submit --master yarn --deploy-mode MODE [--env-archive A] EXECUTORS OPTIONS ARGS`, where
        ARGS is the job and its options. With check, a failure raises with the submit's output and
        the containers' stderr."""
        cmd = [str(support.BIN / "tfos"), "submit", "--master", "yarn", "--deploy-mode", deploy_mode,
               *(["--env-archive", env_archive] if env_archive else []), *self.executor_conf,
               "--conf", f"spark.yarn.archive={self.spark_jars}", *options, *map(str, args)]
        proc = support.run(cmd, env=self.env(), timeout=timeout, cwd=cwd or self.base_dir)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd[2:8])} ... {args[0]} exited {proc.returncode}\n--- stdout\n"
                                 f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}\n--- containers\n"
                                 f"{self.container_logs_text()}")
        return proc

    def upload_public(self, local: Path, folder: str) -> str:
        """`local` into `folder` on this HDFS, readable by everyone (with its folders), so that the
        NodeManager localizes it once, as a public resource, for every later application."""
        remote = f"{folder}/{local.name}"
        self.dfs.shell("-mkdir", "-p", folder)
        self.dfs.shell("-put", "-f", str(local), remote)
        self.dfs.shell("-chmod", "-R", "755", folder)
        return self.path(remote)

    # ---- looking inside
    def _get(self, url: str):
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    def _rm_webapp(self) -> str:
        return self._site("yarn.resourcemanager.webapp.address")

    def _site(self, key: str) -> str:
        for prop in ElementTree.parse(self.conf_dir / "yarn-site.xml").getroot().iter("property"):
            if prop.findtext("name") == key:
                return prop.findtext("value") or ""
        raise KeyError(key)

    def applications(self) -> list[dict]:
        """The ResourceManager's applications: id, name, state, finalStatus, ..."""
        apps = self._get(f"http://{self._rm_webapp()}/ws/v1/cluster/apps").get("apps") or {}
        return sorted(apps.get("app", []), key=lambda a: a["id"])

    def running_containers(self) -> list[dict]:
        """The NodeManager's running containers (id, state, ...), found through the RM's node list."""
        found = []
        for node in self._get(f"http://{self._rm_webapp()}/ws/v1/cluster/nodes")["nodes"]["node"]:
            listing = self._get(f"http://{node['nodeHTTPAddress']}/ws/v1/node/containers").get("containers") or {}
            found += [c for c in listing.get("container", []) if c["state"] == "RUNNING"]
        return found

    def container_pids(self, app_id: str) -> dict[str, int]:
        """Running containers of `app_id` the NodeManager knows -> the pid of the container's main
        process (the JVM its launch script runs, found by the container id on its command line)."""
        suffix = app_id.split("_", 1)[1]
        ids = [c["id"] for c in self.running_containers() if suffix in c["id"]]
        pids = {}
        for pid, cmdline in _processes():
            program = cmdline.split(" ", 1)[0]
            for cid in ids:
                if program.endswith("/java") and f"/{cid}" in cmdline:  # its log dir is on the command line
                    pids[cid] = pid
        return pids

    def container_logs(self) -> dict[str, str]:
        """stdout/stderr of every container so far, by APP/CONTAINER/FILE."""
        found = {}
        for f in sorted(self.base_dir.glob("target/**/*logDir-nm*/application_*/container_*/std*")):
            try:
                found["/".join(f.parts[-3:])] = f.read_text(errors="replace")
            except OSError:
                pass
        return found

    def container_logs_text(self, lines: int = 40) -> str:
        return "\n".join(f"---- {k} (last {lines} lines)\n" + "\n".join(v.splitlines()[-lines:])
                         for k, v in self.container_logs().items() if k.endswith("stderr")) or "(none)"

    def processes(self) -> list[str]:
        """Container processes still alive (their command line or working directory is under the
        NodeManager's directories). Empty after stop()."""
        return [f"{pid} {cmd[:200]}" for pid, cmd in _container_processes(self.base_dir)]


def _processes() -> list[tuple[int, str]]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                out.append((int(p.name), (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")))
            except OSError:
                pass
    return out


def _container_processes(base_dir: Path) -> list[tuple[int, str]]:
    target = f"{base_dir}/target/"
    found = []
    for pid, cmdline in _processes():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if pid != os.getpid() and (cwd.startswith(target) or (target in cmdline and "tests.hadoop.yarn" not in cmdline)):
            found.append((pid, cmdline))
    return found


def reap(base_dir: Path) -> None:
    """KILL every container process of the cluster under `base_dir`, twice a second until none is left
    (a dying executor's Python workers may outlive it by a moment)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        procs = _container_processes(base_dir)
        if not procs:
            return
        for pid, _ in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.5)


if __name__ == "__main__":  # the reaper's command: python -m tests.hadoop.yarn --reap BASE_DIR
    if sys.argv[1:2] != ["--reap"] or len(sys.argv) != 3:
        print("usage: python -m tests.hadoop.yarn --reap BASE_DIR", file=sys.stderr)
        sys.exit(2)
    reap(Path(sys.argv[2]))
