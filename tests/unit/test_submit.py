"""`tfos submit`'s spark-submit command lines, `tfos pack-env`'s archive contents, and the checks
that read what each cluster manager sets (YARN itself runs in tests/hadoop/test_yarn.py)."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import SparkConf

from tfos_jobs import session_builder
from tfos_jobs.deploy import env_archive, submit
from tfos_jobs.config import SparkConfig
from tfos_jobs.jobs.train.driver.gpu import discovery_script
from tfos_jobs.cluster.driver.node_job import check_fixed_executors, container_memory_advice
from tfos_jobs.errors import ConfigError

JOBS = ["predict", "prepare", "sql", "sweep", "train"]
TFOS = Path(sys.executable).parent / "tfos"


def dry_run(*args: str) -> list[str]:
    proc = subprocess.run([str(TFOS), "submit", "--dry-run", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)


def conf_of(cmd: list[str]) -> dict[str, str]:
    return dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")


def test_a_yarn_cluster_mode_submission_ships_the_jar_and_the_environment():
    cmd = dry_run("--master", "yarn", "--deploy-mode", "cluster", "--env-archive", "hdfs:///envs/e.tar.gz",
                  "--jars", "/opt/extra.jar", "--num-executors", "2", "train", "--config", "census", "--set", "a=b")
    assert cmd[0].endswith("spark-submit")
    assert cmd[cmd.index("--jars") + 1] == f"{session_builder.TFRECORD_JAR},/opt/extra.jar" and cmd.count("--jars") == 1
    assert cmd[cmd.index("--archives") + 1] == "hdfs:///envs/e.tar.gz#tfos-env"
    conf = conf_of(cmd)
    assert conf["spark.pyspark.python"] == "./tfos-env/bin/python"
    assert conf["spark.yarn.appMasterEnv.PYSPARK_PYTHON"] == "./tfos-env/bin/python"
    assert conf["spark.yarn.appMasterEnv.TF_USE_LEGACY_KERAS"] == "1" and conf["spark.yarn.maxAppAttempts"] == "1"
    assert "spark.pyspark.driver.python" not in conf  # the driver runs in the archive too
    assert cmd[cmd.index("--name") + 1] == "tfos train"
    assert cmd[-6:] == [str(submit.JOB_SCRIPT), "train", "--config", "census", "--set", "a=b"]


def test_client_mode_keeps_the_driver_on_this_python_and_user_settings_win():
    cmd = dry_run("--master", "yarn", "--env-archive", "e.tar.gz#env", "--archives", "data.zip#data",
                  "--conf", "spark.yarn.maxAppAttempts=2", "--name", "nightly", "predict", "--config", "census")
    conf = conf_of(cmd)
    assert conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.pyspark.python"] == "./env/bin/python"  # the archive's own name for its folder
    assert conf["spark.yarn.maxAppAttempts"] == "2" and cmd.count("spark.yarn.maxAppAttempts=1") == 0
    assert cmd[cmd.index("--archives") + 1] == "data.zip#data,e.tar.gz#env" and cmd.count("--archives") == 1
    assert cmd[cmd.index("--name") + 1] == "nightly" and cmd.count("--name") == 1
    assert "spark.yarn.appMasterEnv.TF_USE_LEGACY_KERAS" not in conf


def test_other_masters_get_the_jar_only():
    cmd = dry_run("--master", "spark://h:7077", "--verbose", "my_job.py", "--x", "1")
    assert cmd[1:3] == ["--jars", str(session_builder.TFRECORD_JAR)] and not any("yarn" in a for a in cmd)
    assert cmd[-3:] == ["my_job.py", "--x", "1"] and "--verbose" in cmd


@pytest.mark.parametrize("args, message", [
    (["--master", "yarn", "bogus"], "'bogus' is neither a job"),
    (["--master", "yarn"], "no job given"),
    (["--master"], "--master needs a value"),
    (["--env-archive"], "--env-archive needs a value"),
])
def test_submission_errors_name_the_argument(args, message):
    with pytest.raises(ConfigError, match=message):
        submit.parse(args, JOBS)


def test_the_archive_holds_the_package_and_not_what_containers_get_elsewhere():
    root = env_archive.venv_root()
    names = {name for _, name, _ in env_archive.members(root)}
    site = str(env_archive.site_packages(root).relative_to(root))
    assert f"{site}/tfos_jobs/jars/tfos-tfrecord.jar" in names
    assert f"{site}/tfos_jobs/resources/conf/census.toml" in names and f"{site}/udfs/__init__.py" in names
    assert f"{site}/tensorflow/__init__.py" in names and "bin/python" in names and "pyvenv.cfg" in names
    assert not any(n.startswith((f"{site}/pyspark/jars/", f"{site}/tensorflow/include/")) for n in names)
    assert not any(Path(n).name.startswith("__editable__") for n in names)


def test_pack_env_refuses_to_write_into_the_venv_it_packs_or_an_unknown_format(tmp_path):
    with pytest.raises(ConfigError, match="would be written into the venv"):
        env_archive.pack(Path(sys.prefix) / "env.tar.gz")
    with pytest.raises(ConfigError, match=r"'env.zip': the archive's name must end in .tar.gz"):
        env_archive.pack(tmp_path / "env.zip")
    assert not list(tmp_path.iterdir())


def test_dynamic_allocation_is_refused_for_a_tf_cluster():
    check_fixed_executors(SparkConf(loadDefaults=False))
    check_fixed_executors(SparkConf(loadDefaults=False).set("spark.dynamicAllocation.enabled", "false"))
    with pytest.raises(ConfigError, match=r"spark.dynamicAllocation.enabled = true.*--num-executors"):
        check_fixed_executors(SparkConf(loadDefaults=False).set("spark.dynamicAllocation.enabled", "true"))


def test_the_jar_check_reads_the_jars_yarn_ships():
    cfg = SparkConfig()
    jar = session_builder.TFRECORD_JAR
    on_yarn = SparkConf(loadDefaults=False).set("spark.yarn.dist.jars", f"file:{jar},file:/opt/x.jar")
    assert session_builder._missing_on_submit(session_builder.jars_given_to_submit(on_yarn), [], cfg) == []
    standalone = SparkConf(loadDefaults=False).set("spark.jars", str(session_builder.TFRECORD_JAR))
    assert session_builder._missing_on_submit(session_builder.jars_given_to_submit(standalone), [], cfg) == []
    assert "the TFRecord data source jar" in session_builder._missing_on_submit(["/opt/other.jar"], [], cfg)[0]


def test_the_gpu_discovery_script_is_found_where_executors_run():
    shipped = "/opt/venv/lib/python3.11/site-packages/tfos_jobs/resources/gpu_discovery.sh"
    in_archive = discovery_script("", shipped, "./tfos-env/bin/python")
    site = env_archive.site_packages(Path("tfos-env"))
    assert in_archive == f"./{site}/tfos_jobs/resources/gpu_discovery.sh"  # inside every YARN container
    assert discovery_script("", shipped, "/opt/venv/bin/python") == shipped  # one install everywhere
    assert discovery_script("./gpus.sh", shipped, "./tfos-env/bin/python") == "./gpus.sh"  # shipped with --files
    assert discovery_script("/etc/spark/gpus.sh", shipped, "") == "/etc/spark/gpus.sh"


def test_yarn_containers_without_room_for_the_tf_node_get_advice():
    yarn = SparkConf(loadDefaults=False).set("spark.master", "yarn").set("spark.executor.memory", "4g")
    advice = container_memory_advice(yarn)
    assert advice and "4096 MB heap and 409 MB beside it" in advice and "spark.executor.memoryOverhead=2g" in advice
    assert container_memory_advice(yarn.set("spark.executor.memoryOverhead", "2g")) is None
    assert container_memory_advice(SparkConf(loadDefaults=False).set("spark.master", "yarn")
                                   .set("spark.executor.memoryOverhead", "1024m")
                                   .set("spark.executor.pyspark.memory", "1g")) is None
    assert container_memory_advice(SparkConf(loadDefaults=False).set("spark.master", "spark://h:7077")) is None
