"""The jobs on a real single-node Kubernetes (scripts/k8s-cluster), as pods of the project's image,
with every path on S3 (S3Proxy) and no disk shared between pods or with this machine.

`make test-k8s` starts the cluster and runs these tests inside its network namespace
(`scripts/k8s-cluster exec`), where 127.0.0.1 is the cluster's own: the S3 server started here is
reachable from the pods (they use the node's network), and `tfos submit` and kubectl reach the API
server. The S3 credentials reach the pods as a Kubernetes Secret (environment variables from a
secretKeyRef), never as a setting in the pods' spec.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from tests.conftest import ROOT
from tests.hadoop.s3 import S3Server

BIN = Path(sys.executable).parent
NAMESPACE = "tfos"
SECRET = "s3-credentials"
ENV_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
JOB_TIMEOUT = 1200
PEOPLE = 6000
TIMES: dict[str, float] = {}  # seconds per job, printed at the end of the run
LOGS: dict[str, str] = {}  # the driver pods' logs of the dataset's jobs


def pytest_terminal_summary(terminalreporter):
    if TIMES:
        terminalreporter.write_line("job seconds (submit to exit): " + ", ".join(f"{k} {v:.0f}" for k, v in TIMES.items()))


@dataclass
class Cluster:
    run_dir: Path
    s3: S3Server

    @property
    def properties(self) -> Path:
        return self.run_dir / "spark.conf"

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None) -> str:
        proc = subprocess.run(["kubectl", "-n", NAMESPACE, *args], capture_output=True, text=True, timeout=timeout,
                              input=stdin)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def pods(self, selector: str) -> list[dict]:
        return json.loads(self.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]

    def s3_settings(self) -> list[str]:
        """S3A against the test server, the keys from the Secret (pods) or the environment (here)."""
        conf = {f"spark.hadoop.{k}": v for k, v in self.s3.hadoop_conf().items()
                if k not in ("fs.s3a.access.key", "fs.s3a.secret.key")}
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = ENV_PROVIDER
        for role in ("driver", "executor"):
            conf[f"spark.kubernetes.{role}.secretKeyRef.AWS_ACCESS_KEY_ID"] = f"{SECRET}:access-key"
            conf[f"spark.kubernetes.{role}.secretKeyRef.AWS_SECRET_ACCESS_KEY"] = f"{SECRET}:secret-key"
        return [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]

    def command(self, job: Sequence[str], *, mode: str = "cluster", executors: int = 2,
                options: Sequence[str] = ()) -> list[str]:
        """`tfos submit` of a tfos job with this cluster's properties file and S3."""
        # a driver here needs the S3A connector the image gives the pods
        local_driver = ["--jars", ",".join(map(str, self.s3.jars()))] if mode == "client" else []
        return [str(BIN / "tfos"), "submit", "--properties-file", str(self.properties), "--deploy-mode", mode, *local_driver,
                "--conf", f"spark.executor.instances={executors}", "--conf", "spark.executor.memory=1g",
                "--conf", "spark.driver.memory=1g", "--conf", "spark.ui.showConsoleProgress=false",
                *self.s3_settings(), *options, *job]

    def env(self) -> dict[str, str]:
        """A driver here (client mode) reads the S3 keys from its environment, as the pods do."""
        return {**os.environ, "AWS_ACCESS_KEY_ID": self.s3.access_key, "AWS_SECRET_ACCESS_KEY": self.s3.secret_key}

    def submit(self, job: Sequence[str], *, timeout: float = JOB_TIMEOUT, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(job, **kw), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=self.env())

    def start(self, job: Sequence[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.command(job, **kw), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd=ROOT, env=self.env())

    def url(self, key: str) -> str:
        return self.s3.url(key)

    def stored(self, key: str) -> Path:
        """Where the S3 server keeps an object or prefix (its filesystem backend)."""
        return self.s3.data_dir / self.s3.bucket / key

    def driver_log(self, submitted: subprocess.CompletedProcess) -> str:
        pod = submission_pod(submitted.stdout)
        return self.kubectl("logs", pod)


def submission_pod(spark_submit_output: str) -> str:
    for line in spark_submit_output.splitlines():
        if "submission ID" in line:
            return line.rsplit(":", 1)[1].split()[0]
    raise AssertionError("no submission ID in spark-submit's output:\n" + spark_submit_output[-3000:])


def wait_for(what: str, check, timeout: float, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    run_dir = os.environ.get("TFOS_K8S_RUN_DIR")
    if not run_dir:
        pytest.skip("needs the cluster `make test-k8s` starts (scripts/k8s-cluster exec sets TFOS_K8S_RUN_DIR)")
    with S3Server(tmp_path_factory.mktemp("s3")) as s3:
        c = Cluster(Path(run_dir), s3)
        c.kubectl("delete", "secret", SECRET, "--ignore-not-found")
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET},
                  "stringData": {"access-key": s3.access_key, "secret-key": s3.secret_key}}
        c.kubectl("apply", "-f", "-", stdin=json.dumps(secret))  # on stdin: no key on a command line
        yield c
        c.kubectl("delete", "pods", "--all", "--wait=true", check=False, timeout=180)
        c.kubectl("delete", "secret", SECRET, "--ignore-not-found", check=False)


@pytest.fixture(scope="session")
def dataset(cluster: Cluster) -> str:
    """The census data at 6,000 people, generated and prepared on S3 by cluster-mode jobs."""
    root = "k8s/pipeline"
    paths = [f"synthetic.people={PEOPLE}", f"synthetic.output={cluster.url(root + '/raw')}",
             f"sources.people.path={cluster.url(root + '/raw/people')}",
             f"sources.regions.path={cluster.url(root + '/raw/regions')}",
             f"sources.events.path={cluster.url(root + '/raw/events')}",
             f"prepare.output={cluster.url(root + '/dataset')}", "prepare.files_per_split=4"]
    sets = [a for p in paths for a in ("--set", p)]
    for job in (["generate", "--config", "census", *sets], ["prepare", "--config", "census", *sets, "--overwrite"]):
        t0 = time.monotonic()
        proc = cluster.submit(job)
        TIMES[job[0]] = time.monotonic() - t0
        assert proc.returncode == 0, f"{job[0]}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        LOGS[job[0]] = cluster.driver_log(proc)
    return cluster.url(root + "/dataset")
