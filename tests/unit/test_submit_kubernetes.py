"""`tfos submit` on a `k8s://` master: what it sets (the image's job script, jar and Python, an
executor per TF node, memory for TensorFlow beside the heap) and what it refuses before
spark-submit starts. The jobs themselves run as pods in tests/k8s/ (make test-k8s)."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tfos_jobs import session_builder
from tfos_jobs.deploy import kubernetes, submit
from tfos_jobs.errors import ConfigError

TFOS = Path(sys.executable).parent / "tfos"
MASTER = "k8s://https://10.0.0.1:6443"
IMAGE = f"--conf={kubernetes.IMAGE}=registry.example/tfos-jobs:0.1.0"
ACCOUNT = f"--conf={kubernetes.SERVICE_ACCOUNT}=spark"


def command(*args: str) -> list[str]:
    return submit.command(submit.parse(list(args), ["train", "predict", "prepare", "sweep", "sql"]))


def conf_of(cmd: list[str]) -> dict[str, str]:
    out = {}
    for i, a in enumerate(cmd):
        if a == "--conf":
            key, value = cmd[i + 1].split("=", 1)
            out[key] = value
        elif a.startswith("--conf="):
            key, value = a.removeprefix("--conf=").split("=", 1)
            out[key] = value
    return out


def test_cluster_mode_runs_the_images_job_script_jar_and_python_with_an_executor_per_tf_node():
    cmd = command("--master", MASTER, "--deploy-mode", "cluster", IMAGE, ACCOUNT,
                  "train", "--config", "census", "--set", "train.workers=3")
    conf = conf_of(cmd)
    assert cmd[cmd.index("--jars") + 1] == kubernetes.IMAGE_TFRECORD_JAR
    assert cmd[cmd.index(kubernetes.IMAGE_JOB_SCRIPT) + 1:] == ["train", "--config", "census", "--set", "train.workers=3"]
    assert conf[kubernetes.PYTHON] == kubernetes.IMAGE_PYTHON and kubernetes.DRIVER_PYTHON not in conf
    assert conf[kubernetes.EXECUTORS] == "3"
    assert conf[kubernetes.OVERHEAD] == kubernetes.TF_NODE_OVERHEAD
    assert str(session_builder.TFRECORD_JAR) not in cmd and str(submit.JOB_SCRIPT) not in cmd


def test_client_mode_keeps_the_local_driver_files_and_user_settings_win():
    cmd = command("--master", MASTER, IMAGE, "--conf", "spark.executor.memoryOverhead=3g",
                  "--conf", "spark.executor.instances=4", "predict", "--config", "census")
    conf = conf_of(cmd)
    assert cmd[cmd.index("--jars") + 1] == str(session_builder.TFRECORD_JAR)
    assert str(submit.JOB_SCRIPT) in cmd
    assert conf["spark.executor.memoryOverhead"] == "3g" and cmd.count("spark.executor.memoryOverhead=2g") == 0
    assert conf[kubernetes.PYTHON] == kubernetes.IMAGE_PYTHON  # executors run the image's Python
    assert conf[kubernetes.DRIVER_PYTHON] == sys.executable  # the driver, this one
    assert conf["spark.executor.instances"] == "4"


def test_a_properties_file_gives_the_master_and_image(tmp_path):
    props = tmp_path / "k8s.conf"
    props.write_text(f"# a platform's settings\nspark.master  {MASTER}\n{kubernetes.IMAGE}=img:1\n"
                     f"{kubernetes.SERVICE_ACCOUNT} spark\nspark.submit.deployMode cluster\n")
    cmd = command("--properties-file", str(props), "prepare", "--config", "census")
    assert kubernetes.IMAGE_JOB_SCRIPT in cmd
    assert kubernetes.OVERHEAD not in conf_of(cmd)  # prepare runs no TensorFlow


@pytest.mark.parametrize("args, message", [
    (["--master", MASTER, "train", "--config", "census"],
     r"spark.kubernetes.container.image is not set: .*make image"),
    (["--master", MASTER, "--deploy-mode", "cluster", IMAGE, "train", "--config", "census"],
     r"spark.kubernetes.authenticate.driver.serviceAccountName is not set: .*conf/k8s/rbac.yaml"),
    (["--master", MASTER, IMAGE, "--conf", "spark.executor.instances=1", "train", "--config", "census",
      "--set", "train.workers=2"],
     r"spark.executor.instances=1, but the training cluster has 2 nodes, one per executor"),
    (["--master", MASTER, IMAGE, "--num-executors", "1", "train", "--config", "census"],
     r"spark.executor.instances=1, but the training cluster has 2 nodes"),
    (["--master", MASTER, "--deploy-mode", "cluster", IMAGE, ACCOUNT, "my_job.py"],
     r"my_job.py is on this machine's disk, which the driver pod cannot read: .*spark.kubernetes.file.upload.path"),
])
def test_what_cannot_run_on_kubernetes_is_refused_naming_the_setting(args, message):
    with pytest.raises(ConfigError, match=message):
        command(*args)


def test_a_script_in_the_image_or_on_s3_needs_no_upload_path():
    cmd = command("--master", MASTER, "--deploy-mode", "cluster", IMAGE, ACCOUNT, "--py-files", "s3a://b/lib.zip",
                  "local:///opt/jobs/my_job.py")
    assert cmd[-1] == "local:///opt/jobs/my_job.py"


def test_the_cli_reports_a_refusal_as_one_line():
    proc = subprocess.run([str(TFOS), "submit", "--dry-run", "--master", MASTER, "train", "--config", "census"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "tfos submit: error: spark.kubernetes.container.image is not set: Kubernetes runs the driver and executors "
        "from an image (build it with `make image`; docs/deploy.md)"]


def test_read_properties_takes_spark_submit_separators(tmp_path):
    props = tmp_path / "p.conf"
    props.write_text("a.b 1\nc.d=2\ne.f: 3\n! comment\n\n  g.h   four words  \n")
    assert kubernetes.read_properties(str(props)) == {"a.b": "1", "c.d": "2", "e.f": "3", "g.h": "four words"}
    assert kubernetes.read_properties(str(tmp_path / "missing")) == {}


WATCHER = """\
26/11/26 15:23:30 INFO LoggingPodStatusWatcherImpl: State changed, new state:
\t pod name: tfos-train-9b37-driver
\t namespace: tfos
\t phase: {phase}
\t container status:
\t\t container state: {state}
\t\t {detail}
"""


def follow(script: str, capsys, monkeypatch) -> tuple[int, str]:
    monkeypatch.setenv("PATH", "/nonexistent")  # no kubectl: its command is printed instead
    code = kubernetes.follow(["/bin/bash", "-c", script], {}, {kubernetes.IMAGE: "img:1"}, MASTER)
    return code, capsys.readouterr().err


def test_a_failed_driver_pod_is_the_exit_code_though_spark_submit_exits_0(tmp_path, capsys, monkeypatch):
    (tmp_path / "out").write_text(WATCHER.format(phase="Failed", state="terminated", detail="exit code: 3"))
    code, err = follow(f"/bin/cat {tmp_path / 'out'}; exit 0", capsys, monkeypatch)
    assert code == 3
    assert err.splitlines() == ["tfos submit: error: the driver pod tfos/tfos-train-9b37-driver failed (exit code 3)",
                                "  its log: kubectl -n tfos logs tfos-train-9b37-driver"]


def test_a_succeeded_driver_pod_is_0(tmp_path, capsys, monkeypatch):
    (tmp_path / "out").write_text(WATCHER.format(phase="Succeeded", state="terminated", detail="exit code: 0"))
    assert follow(f"/bin/cat {tmp_path / 'out'}; exit 0", capsys, monkeypatch) == (0, "")


def test_a_driver_whose_image_cannot_be_pulled_is_not_waited_for(tmp_path, capsys, monkeypatch):
    (tmp_path / "out").write_text(WATCHER.format(phase="Pending", state="waiting", detail="pending reason: ErrImageNeverPull"))
    # spark-submit would wait for ever
    code, err = follow(f"/bin/cat {tmp_path / 'out'}; exec /bin/sleep 600", capsys, monkeypatch)
    assert code == 1
    assert "image 'img:1' is not on the node and cannot be pulled" in err
