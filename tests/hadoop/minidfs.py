"""A real HDFS for tests: Hadoop's MiniDFSCluster (a NameNode and DataNodes, in one JVM) on 127.0.0.1.

    with MiniDFS(tmp_path / "dfs") as dfs:
        spark.range(10).write.parquet(f"{dfs.url}/data/t")      # hdfs://127.0.0.1:PORT/data/t
        dfs.shell("-ls", "-R", "/data")                         # hadoop fs, as a Java child

For fault tests, DataNodes can be lost and brought back while the JVM runs (commands on its stdin):

    with MiniDFS(tmp_path / "dfs", datanodes=3, replication=2) as dfs:
        dfs.stop_datanode(dfs.datanode_names()[0])    # the replicas it held; the NameNode is not told
        dfs.block_state()                        # {"live": 3, "dead": 0, "under_replicated": 0, ...}
        dfs.restart_datanodes()

As a script (for make bench or by hand), running until interrupted:

    python -m tests.hadoop.minidfs --dir /tmp/dfs [--datanodes 1] [--yarn]

prints `hdfs://127.0.0.1:PORT`, then `HADOOP_CONF_DIR=...` (and with --yarn the ResourceManager).

The NameNode takes a free port; its URL uses 127.0.0.1, which processes in other mount namespaces
(the isolated workers) reach too: only the mount namespace is theirs, the network is shared. The
JVM runs as the user of this process, who is therefore the HDFS superuser (permission checks do
not apply to it); any other name in HADOOP_USER_NAME is an ordinary user (simple authentication).
"""
from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.hadoop import support

LAUNCHER = "TfosMiniCluster"


class MiniDFS:
    """Starts on `start()` (or `with`); `stop()` kills the JVM and its process group.

    url       hdfs://127.0.0.1:PORT (no trailing slash)
    conf_dir  core-site.xml and hdfs-site.xml (and yarn-site.xml with yarn=True), for HADOOP_CONF_DIR
    yarn_rm   the ResourceManager's host:port with yarn=True, else None
    log       the JVM's output

    replication: dfs.replication of the cluster and its clients (default: the DataNodes, at most 3);
    conf: more settings for the NameNode and DataNodes (e.g. shorter heartbeats).
    """

    def __init__(self, base_dir: Path | str, datanodes: int = 1, yarn: bool = False,
                 nodemanager_mb: int = 4096, heap: str | None = None, start_timeout: float = 180,
                 replication: int | None = None, conf: dict[str, str] | None = None):
        self.base_dir = Path(base_dir).resolve()
        self.datanodes = datanodes
        self.replication = replication or min(datanodes, 3)
        self.conf = dict(conf or {})
        self.yarn = yarn
        self.nodemanager_mb = nodemanager_mb
        self.heap = heap or ("1g" if yarn else "768m")
        self.start_timeout = start_timeout
        self.conf_dir = self.base_dir / "conf"
        self.data_dir = self.base_dir / "data"
        self.log = self.base_dir / "minidfs.log"
        self.url: str | None = None
        self.yarn_rm: str | None = None
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen | None = None
        self._seq = itertools.count(1)

    # ---- life cycle
    def start(self) -> "MiniDFS":
        if self._proc is not None:
            raise RuntimeError("MiniDFS already started")
        jars_dir = support.ensure_test_jars()
        classpath = ":".join([str(jars_dir / "classes"), str(jars_dir / "minicluster" / "*"),
                              str(support.pyspark_jars_dir() / "*")])
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("core-site.xml", "hdfs-site.xml", "yarn-site.xml"):
            (self.conf_dir / stale).unlink(missing_ok=True)
        self.log.unlink(missing_ok=True)  # its READY line is what start waits for
        cmd = [support.java(), f"-Xmx{self.heap}", "-Dlog4j2.level=WARN", "-Djava.net.preferIPv4Stack=true",
               "-cp", classpath, LAUNCHER, "--conf-dir", self.conf_dir, "--data-dir", self.data_dir,
               "--namenode-port", "0", "--datanodes", str(self.datanodes), "--replication", str(self.replication),
               *[a for k, v in self.conf.items() for a in ("--conf", f"{k}={v}")]]
        if self.yarn:
            cmd += ["--yarn", "--nodemanager-mb", str(self.nodemanager_mb)]
        env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_USER_NAME", "HADOOP_CONF_DIR")}
        started = time.monotonic()
        self._proc = support.spawn(cmd, self.log, env=env, cwd=self.base_dir)
        try:
            lines = support.wait_until(self._ready_lines, self._proc, self.start_timeout, "MiniDFS", self.log, 0.2)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        self.url = lines["HDFS"]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.yarn_rm = lines.get("YARN")
        return self

    def _ready_lines(self) -> dict[str, str] | None:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return None
        found = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key in ("HDFS", "YARN"):
                found[key] = value.strip()
            elif line.strip() == "READY":
                return found
        return None

    def stop(self) -> None:
        if self._proc is not None:
            support.kill_group(self._proc, grace=3)
            self._proc = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> "MiniDFS":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- for tests
    def path(self, p: str) -> str:
        """hdfs://127.0.0.1:PORT/p"""
        return f"{self.url}/{p.lstrip('/')}"

    def spark_conf(self) -> dict[str, str]:
        """Settings a Spark session may add. None is needed to read or write full hdfs:// URLs;
        these make bare paths resolve to this HDFS and keep replication within the datanodes."""
        return {"spark.hadoop.fs.defaultFS": self.url,
                "spark.hadoop.dfs.replication": str(self.replication)}

    # ---- DataNode faults (the launcher's stdin commands)
    def datanode_names(self) -> list[str]:
        """The running DataNodes, by transfer address (127.0.0.1:PORT)."""
        return self.command("datanodes")["names"].split(",")

    def stop_datanode(self, name: str) -> int:
        """Shut DataNode `name` down as if lost: the NameNode notices when its heartbeats stop.
        Returns how many block replicas it held."""
        return int(self.command("stop-datanode", name)["replicas"])

    def restart_datanodes(self) -> int:
        """Every stopped DataNode again, with its port and storage; returns once they registered."""
        return int(self.command("restart-datanodes", timeout=180)["restarted"])

    def block_state(self) -> dict[str, int]:
        """The NameNode's view: live, dead (DataNodes), blocks, replicas (on live DataNodes),
        under_replicated, missing, pending; and replicated, the replicas the running DataNodes
        copied for it (re-replication)."""
        return {k: int(v) for k, v in self.command("state").items()}

    def command(self, *words: str, timeout: float = 120) -> dict[str, str]:
        """One command to the launcher; its answer's key=value pairs (the answer is a line of the log)."""
        if not self.running or self._proc is None or self._proc.stdin is None:
            raise RuntimeError("MiniDFS is not running")
        seq = next(self._seq)
        offset = self.log.stat().st_size
        self._proc.stdin.write(f"{seq} {' '.join(words)}\n".encode())
        self._proc.stdin.flush()

        def answer() -> str | None:
            with open(self.log, "rb") as fh:
                fh.seek(offset)
                for line in fh.read().decode(errors="replace").splitlines():
                    if line.startswith((f"REPLY {seq} ", f"FAILED {seq} ")) or line == f"REPLY {seq}":
                        return line
            return None

        line = support.wait_until(answer, self._proc, timeout, f"MiniDFS command {' '.join(words)!r}", self.log)
        if line.startswith("FAILED"):
            raise RuntimeError(f"MiniDFS command {' '.join(words)!r}: {line.split(' ', 2)[2]}")
        return dict(word.split("=", 1) for word in line.split()[2:])

    def env(self) -> dict[str, str]:
        """Environment for a child that should use this HDFS by default (HADOOP_CONF_DIR)."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir)}

    def shell(self, *args: str, user: str | None = None, check: bool = True,
              timeout: float = 120) -> subprocess.CompletedProcess:
        """`hadoop fs ARGS` (Hadoop's FsShell from pyspark's jars, with this cluster's conf_dir as
        the default file system), as `user` if given (HADOOP_USER_NAME; else the superuser). About
        1.5 s per call (a JVM start)."""
        if not self.running:
            raise RuntimeError("MiniDFS is not running")
        env = {k: v for k, v in os.environ.items() if k != "HADOOP_USER_NAME"}
        if user:
            env["HADOOP_USER_NAME"] = user
        cmd = [support.java(), "-Xmx256m", "-cp", f"{self.conf_dir}:{support.pyspark_jars_dir()}/*",
               "org.apache.hadoop.fs.FsShell", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"hadoop fs {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.hadoop.minidfs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, type=Path, help="data, conf/ and minidfs.log go here")
    ap.add_argument("--datanodes", type=int, default=1)
    ap.add_argument("--yarn", action="store_true", help="also start a MiniYARNCluster (one NodeManager)")
    ap.add_argument("--nodemanager-mb", type=int, default=4096)
    ap.add_argument("command", nargs=argparse.REMAINDER,
                    help="-- CMD ARGS: run this command while HDFS is up ({url} in an argument becomes the "
                         "NameNode's URL), then stop; exits with the command's status")
    args = ap.parse_args(argv)
    if args.command:
        with MiniDFS(args.dir, datanodes=args.datanodes) as dfs:
            return subprocess.call([a.replace("{url}", dfs.url) for a in args.command[args.command[0] == "--":]])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGHUP, lambda *_: stop.append(1))
    dfs = MiniDFS(args.dir, datanodes=args.datanodes, yarn=args.yarn, nodemanager_mb=args.nodemanager_mb)
    dfs.start()
    try:
        print(dfs.url)
        print(f"HADOOP_CONF_DIR={dfs.conf_dir}")
        if dfs.yarn_rm:
            print(f"YARN {dfs.yarn_rm}")
        print(f"(up in {dfs.startup_seconds:.1f} s; log {dfs.log}; Ctrl-C or TERM stops it)", file=sys.stderr)
        sys.stdout.flush()
        while not stop and dfs.running:
            time.sleep(0.5)
        if not dfs.running:
            print(f"MiniDFS exited; {dfs.log}:\n{support.tail(dfs.log)}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        pass
    finally:
        dfs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
