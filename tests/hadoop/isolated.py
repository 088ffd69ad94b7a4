"""A Spark standalone cluster whose executors share no disk with the driver or with each other:
`scripts/standalone-cluster start --isolate` (each worker in its own mount namespace with a private
tmpfs over /tmp and /dev/shm; the repository and the venv stay visible).

    with IsolatedCluster(tmp_path / "cluster") as cluster:
        proc = cluster.submit(["job.py", "--arg", "x"])         # scripts/tfos-submit --master spark://...
        proc = cluster.tfos(["prepare", "--config", CONF])       # the tfos CLI, spark.master set to the cluster

What the driver (this test, or a spark-submit it starts) writes under /tmp is invisible to the
executors: data must travel through HDFS/S3, spark.files/addFile, or the driver itself.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Sequence

from tests.hadoop import support

CLUSTER_SCRIPT = support.ROOT / "scripts" / "standalone-cluster"
SUBMIT_SCRIPT = support.ROOT / "scripts" / "tfos-submit"


class IsolatedCluster:
    """Starts on `start()` (or `with`); `stop()` ends every process of it.

    url          spark://127.0.0.1:PORT
    webui        http://127.0.0.1:PORT (JSON state at /json/)
    run_dir      logs/ (daemon logs; logs/work-N/ gets the executors' stdout/stderr at stop), pids/
    executor_conf  spark-submit --conf arguments that fit one executor in each worker
    """

    def __init__(self, run_dir: Path | str, workers: int = 2, cores: int = 1, memory: str = "1536m",
                 executor_memory: str = "1g", daemon_memory: str = "512m", start_timeout: int = 120):
        self.run_dir = Path(run_dir).resolve()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.executor_memory = executor_memory
        self.daemon_memory = daemon_memory
        self.start_timeout = start_timeout
        self.url: str | None = None
        self.webui: str | None = None
        self.startup_seconds: float | None = None
        self._reaper: support.Reaper | None = None
        self._needs_stop = False

    # ---- life cycle
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for spark-submit, the tfos CLI and the cluster script: the venv's Python
        on driver and executors, tf-keras, and everything on 127.0.0.1."""
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "TFOS_VENV": str(support.BIN.parent), "TF_USE_LEGACY_KERAS": "1", "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_DAEMON_MEMORY": self.daemon_memory}
        env.pop("SPARK_HOME", None)
        env.update(extra or {})
        return env

    def start(self) -> "IsolatedCluster":
        if self.url:
            raise RuntimeError("IsolatedCluster already started")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._needs_stop = True
        # If this process dies before stop(), the reaper stops the cluster (its daemons run in
        # sessions of their own, on purpose, so nothing else would end them).
        self._reaper = support.Reaper([CLUSTER_SCRIPT, "stop", self.run_dir], self.run_dir / "reaper.log",
                                      env=self.env())
        started = time.monotonic()
        proc = support.run(
            [CLUSTER_SCRIPT, "start", "--isolate", self.run_dir, self.workers, self.cores, self.memory],
            env=self.env({"STANDALONE_START_TIMEOUT": str(self.start_timeout)}),
            timeout=self.start_timeout + 60, cwd=support.ROOT)
        if proc.returncode != 0:
            self.stop()
            raise RuntimeError(f"standalone-cluster start --isolate failed ({proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")
        self.startup_seconds = time.monotonic() - started
        self.url = proc.stdout.strip().splitlines()[-1]
        self.webui = (self.run_dir / "master-webui").read_text().strip()
        return self

    def stop(self) -> str:
        """Stops the cluster (the script's stop: TERM, then KILL, then stragglers); returns its report."""
        if not self._needs_stop:
            return "not running"
        self._needs_stop = False
        proc = support.run([CLUSTER_SCRIPT, "stop", self.run_dir], env=self.env(), timeout=180, cwd=support.ROOT)
        if self._reaper:
            self._reaper.disarm()
            self._reaper = None
        self.url = None
        return (proc.stdout + proc.stderr).strip()

    def __enter__(self) -> "IsolatedCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- running jobs against it
    @property
    def executor_conf(self) -> list[str]:
        return ["--conf", f"spark.executor.cores={self.cores}", "--conf", "spark.task.cpus=1",
                "--conf", f"spark.executor.memory={self.executor_memory}"]

    def submit(self, args: Sequence[str | Path], env: dict[str, str] | None = None, timeout: float = 600,
               check: bool = True, tfos_submit: bool = True) -> subprocess.CompletedProcess:
        """scripts/tfos-submit (or the venv's plain spark-submit) --master URL, executor sizes, then
        `args` (spark-submit options, the script, its arguments), from the repository root. With
        check, a failure raises with the driver's output and the executors' stderr."""
        submit = str(SUBMIT_SCRIPT) if tfos_submit else str(support.BIN / "spark-submit")
        cmd = [submit, "--master", self.url, *self.executor_conf, *map(str, args)]
        return self._run(cmd, env, timeout, check)

    def tfos_sets(self) -> list[str]:
        """`--set` arguments that point a tfos command at this cluster."""
        sets = [f"spark.master={self.url}", f"spark.conf.spark.executor.cores={self.cores}",
                "spark.conf.spark.task.cpus=1", f"spark.conf.spark.executor.memory={self.executor_memory}",
                "spark.conf.spark.ui.showConsoleProgress=false"]
        return [a for s in sets for a in ("--set", s)]

    def tfos(self, args: Sequence[str | Path], env: dict[str, str] | None = None, timeout: float = 900,
             check: bool = True) -> subprocess.CompletedProcess:
        """The venv's `tfos ARGS --set spark.master=URL ...` (its driver runs here, outside the namespaces)."""
        return self._run([str(support.BIN / "tfos"), *map(str, args), *self.tfos_sets()], env, timeout, check)

    def _run(self, cmd: list[str], env, timeout, check) -> subprocess.CompletedProcess:
        if not self.url:
            raise RuntimeError("the cluster is not running")
        proc = support.run(cmd, env=self.env(env), timeout=timeout, cwd=support.ROOT)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                                 f"\n--- stderr\n{proc.stderr[-6000:]}\n--- executors\n{self.executor_logs_text()}")
        return proc

    # ---- looking inside
    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=10) as r:
            return json.load(r)

    def worker_pids(self) -> dict[int, int]:
        """Worker number -> the worker daemon's pid (the JVM, in its own mount namespace)."""
        pids = {}
        for f in sorted((self.run_dir / "pids").glob("worker-*.pid")):
            pids[int(f.stem.split("-")[1])] = int(f.read_text().strip())
        return pids

    def executor_logs(self) -> dict[str, str]:
        """The executors' stdout/stderr by path (work-N/APP/EXEC/stderr): read inside the workers'
        namespaces through /proc/PID/root while they run, from logs/work-N/ after stop."""
        found: dict[str, str] = {}
        roots = []
        for n, pid in self.worker_pids().items():
            roots.append((f"work-{n}", Path(f"/proc/{pid}/root{self.run_dir}/work-{n}")))
        roots += [(d.name, d) for d in sorted((self.run_dir / "logs").glob("work-*"))]
        for name, root in roots:
            try:
                files = sorted(root.glob("*/*/std*"))
            except OSError:
                continue
            for f in files:
                key = f"{name}/{f.relative_to(root)}"
                if key not in found:
                    try:
                        found[key] = f.read_text(errors="replace")
                    except OSError:
                        pass
        return found

    def executor_logs_text(self, lines: int = 40) -> str:
        return "\n".join(f"---- {k} (last {lines} lines)\n" + "\n".join(v.splitlines()[-lines:])
                         for k, v in self.executor_logs().items() if k.endswith("stderr")) or "(none)"

    def processes(self) -> list[str]:
        """Every process of this cluster still alive: its RUN_DIR on the command line, or a working
        directory under a work-N/ (as the script's stop finds them). Empty after stop()."""
        found = []
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                cwd = os.readlink(p / "cwd")
            except OSError:
                continue
            if f"{self.run_dir}/conf" in cmdline or cwd.startswith(f"{self.run_dir}/work-"):
                if "standalone-cluster" not in cmdline and "tests.hadoop.reaper" not in cmdline:
                    found.append(f"{p.name} {cmdline[:200]}")
        return found
