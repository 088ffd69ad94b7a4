"""What `tfos submit` sets and checks for a `k8s://` master, and how it follows a driver pod.

On Kubernetes nothing comes from the submitting machine's disk in cluster mode: the job script and the TFRecord jar are
the image's own (`local://` paths into the venv the Dockerfile makes), executors run the image's Python, and a
TensorFlow node in an executor's Python worker needs memory beyond the JVM's (the pod's limit is heap + overhead).
Mistakes that would otherwise show up as a pod stuck Pending or a driver failing deep in its log are refused before
spark-submit starts, naming the setting. In cluster mode spark-submit exits 0 whatever the driver did; `follow` reads
its pod status lines, and a failed driver becomes a non-zero exit with the driver's last log lines (through kubectl,
when it is on PATH)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from tfos_jobs.errors import ConfigError

MASTER_PREFIX = "k8s://"
# The Dockerfile's venv: every image built from it has the package, its jar and Python here.
IMAGE_VENV = "/opt/tfos/.venv"
IMAGE_PYTHON = f"{IMAGE_VENV}/bin/python"
IMAGE_PACKAGE = f"{IMAGE_VENV}/lib/python3.11/site-packages/tfos_jobs"
IMAGE_JOB_SCRIPT = f"local://{IMAGE_PACKAGE}/entrypoints/job.py"
IMAGE_TFRECORD_JAR = f"local://{IMAGE_PACKAGE}/jars/tfos-tfrecord.jar"
RBAC_MANIFEST = "conf/k8s/rbac.yaml"

IMAGE = "spark.kubernetes.container.image"
SERVICE_ACCOUNT = "spark.kubernetes.authenticate.driver.serviceAccountName"
NAMESPACE = "spark.kubernetes.namespace"
UPLOAD_PATH = "spark.kubernetes.file.upload.path"
EXECUTORS = "spark.executor.instances"
PYTHON = "spark.pyspark.python"
DRIVER_PYTHON = "spark.pyspark.driver.python"
OVERHEAD = "spark.executor.memoryOverhead"
# Any of these means the user sized the memory beside the executor's heap.
OVERHEAD_SETTINGS = (OVERHEAD, "spark.executor.memoryOverheadFactor", "spark.kubernetes.memoryOverheadFactor",
                     "spark.executor.pyspark.memory")
# A TensorFlow node or a loaded model lives in the executor's Python worker.
TF_NODE_OVERHEAD = "2g"
TF_JOBS = frozenset({"train", "sweep", "predict", "sql", "serve-sql", "evaluate"})
IMAGE_MISSING = ("ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName")


def is_kubernetes(master: str) -> bool:
    return master.startswith(MASTER_PREFIX)


def read_properties(path: str | None) -> dict[str, str]:
    """A spark-submit --properties-file (`key value` or `key=value` lines), when it is a local file."""
    if not path or not Path(path).is_file():
        return {}
    out = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"([^\s=:]+)\s*[=:\s]\s*(.*)", line)
        if match:
            out[match.group(1)] = match.group(2).strip()
    return out


def settings(*, conf: Mapping[str, str], cluster_mode: bool, job: str | None, nodes: int | None,
             local_files: Iterable[str], image_python: bool = True) -> list[str]:
    """The `--conf` arguments tfos adds on Kubernetes; raises ConfigError for what cannot run.

    `conf` is every setting the user gave (--conf and the properties file); `job` the tfos command (None for a script of
    the user's); `nodes` the TF nodes a train job starts; `local_files` the files of the submitting machine the job
    needs (scripts, --py-files, --jars); `image_python` False when the executors run a packed environment's Python
    instead of the image's."""
    if not conf.get(IMAGE):
        raise ConfigError(f"{IMAGE} is not set: Kubernetes runs the driver and executors from an image "
                          "(build it with `make image`; docs/deploy.md)")
    if cluster_mode and not conf.get(SERVICE_ACCOUNT):
        raise ConfigError(f"{SERVICE_ACCOUNT} is not set: in cluster mode the driver pod creates the executor "
                          f"pods, which the namespace's default service account may not; {RBAC_MANIFEST} makes "
                          f"a `spark` account with those rights (then --conf {SERVICE_ACCOUNT}=spark)")
    local = list(local_files)
    if cluster_mode and local and not conf.get(UPLOAD_PATH):
        raise ConfigError(f"{local[0]} is on this machine's disk, which the driver pod cannot read: put it in the "
                          f"image (local://...) or on a shared filesystem (s3a://, hdfs://), or set {UPLOAD_PATH}")
    executors = conf.get(EXECUTORS)
    if nodes is not None and executors is not None and executors.isdigit() and int(executors) < nodes:
        raise ConfigError(f"{EXECUTORS}={executors}, but the training cluster has {nodes} nodes, one per executor: "
                          f"set {EXECUTORS}={nodes} or fewer train.workers")
    out: list[str] = []

    def add(key: str, value: str) -> None:
        if key not in conf:
            out.extend(["--conf", f"{key}={value}"])

    if image_python and PYTHON not in conf:
        add(PYTHON, IMAGE_PYTHON)
        if not cluster_mode:  # spark.pyspark.python would name the driver's Python too
            add(DRIVER_PYTHON, sys.executable)
    if nodes is not None:
        add(EXECUTORS, str(nodes))
    if job in TF_JOBS and not any(k in conf for k in OVERHEAD_SETTINGS):
        add(OVERHEAD, TF_NODE_OVERHEAD)
    return out


def follow(cmd: Sequence[str], env: Mapping[str, str], conf: Mapping[str, str], master: str) -> int:
    """Runs a cluster-mode spark-submit, passing its output through, and returns the driver's exit code: spark-submit's
    own is 0 for a failed driver. A driver whose image cannot be found is deleted at once rather than left Pending."""
    proc = subprocess.Popen(list(cmd), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    assert proc.stdout is not None
    pod = namespace = None
    exit_code: int | None = None
    failed = missing_image = False
    for line in proc.stdout:
        sys.stdout.write(line)
        if m := re.search(r"pod name: (\S+)", line):
            pod = pod or m.group(1)
        elif m := re.search(r"namespace: (\S+)", line):
            namespace = namespace or m.group(1)
        elif m := re.search(r"exit code: (-?\d+)", line):
            exit_code = int(m.group(1))
        elif "(phase: Failed)" in line:
            failed = True
        elif any(reason in line for reason in IMAGE_MISSING) and not missing_image:
            missing_image = True
            proc.terminate()
    rc = proc.wait()
    sys.stdout.flush()
    where = f"driver pod {namespace or conf.get(NAMESPACE, 'default')}/{pod}"
    if missing_image:
        if pod:
            _kubectl(conf, master, namespace, ["delete", "pod", pod, "--wait=false"])
        print(f"tfos submit: error: the {where} cannot start: image {conf.get(IMAGE)!r} is not on the node and "
              f"cannot be pulled ({IMAGE}, spark.kubernetes.container.image.pullPolicy); the pod was deleted",
              file=sys.stderr)
        return 1
    if not failed and not (exit_code or 0):
        return rc
    print(f"tfos submit: error: the {where} failed (exit code {exit_code})", file=sys.stderr)
    logs = _kubectl(conf, master, namespace, ["logs", pod, "--tail=40"]) if pod else None
    if logs is None:
        print(f"  its log: kubectl -n {namespace} logs {pod}", file=sys.stderr)
    else:
        print("  the driver's last lines:\n" + "\n".join("    " + ln for ln in logs.splitlines()), file=sys.stderr)
    return exit_code or 1


def _kubectl(conf: Mapping[str, str], master: str, namespace: str | None, args: list[str]) -> str | None:
    """kubectl with the submission's certificate files when spark-submit was given them, else the kubeconfig's (a token
    is not passed: on kubectl's command line any user could read it); None without kubectl or on its failure."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    cmd = [kubectl, "-n", namespace or conf.get(NAMESPACE, "default")]
    prefix = "spark.kubernetes.authenticate.submission."
    flags = {"caCertFile": "--certificate-authority", "clientCertFile": "--client-certificate",
             "clientKeyFile": "--client-key"}
    if prefix + "clientCertFile" in conf:  # those alone: a kubeconfig's credentials would win over them
        cmd += ["--kubeconfig", os.devnull, "--server", master[len(MASTER_PREFIX):]]
        cmd += [a for key, flag in flags.items() if prefix + key in conf for a in (flag, conf[prefix + key])]
    try:
        done = subprocess.run(cmd + args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
