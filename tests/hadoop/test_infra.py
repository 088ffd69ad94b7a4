"""The real-component test infrastructure works: Spark on a real HDFS, executors that share no disk
with the driver or with each other, and S3 through S3A against an authenticating S3 server."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.hadoop import support

JOBS = Path(__file__).parent / "jobs"


def _people(spark, n: int):
    from pyspark.sql import functions as F
    return (spark.range(n).withColumnRenamed("id", "person")
            .withColumn("age", (F.col("person") % 70 + 18).cast("int"))
            .withColumn("name", F.concat(F.lit("p"), F.col("person").cast("string"))))


def _expected_age_sum(n: int) -> int:
    return sum(i % 70 + 18 for i in range(n))


# ---- HDFS


def test_spark_writes_and_reads_parquet_on_hdfs(spark, minidfs, hdfs_dir):
    assert minidfs.url.startswith("hdfs://127.0.0.1:")
    _people(spark, 5000).repartition(3).write.parquet(f"{hdfs_dir}/people")

    back = spark.read.parquet(f"{hdfs_dir}/people")
    assert back.count() == 5000
    assert back.agg({"age": "sum"}).first()[0] == _expected_age_sum(5000)
    assert back.filter("person = 4321").first()["name"] == "p4321"
    # the files are in HDFS (asked through Hadoop's FileSystem, not Spark's reader)
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{hdfs_dir}/people")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    names = sorted(s.getPath().getName() for s in fs.listStatus(path))
    assert "_SUCCESS" in names and sum(n.endswith(".parquet") for n in names) == 3
    assert fs.getUri().toString() == minidfs.url


def test_hdfs_checks_permissions_of_other_users(spark, minidfs, hdfs_dir):
    """This process's user is the HDFS superuser; another user name is an ordinary user."""
    jvm = spark.sparkContext._jvm
    hadoop_fs, Path_ = jvm.org.apache.hadoop.fs, jvm.org.apache.hadoop.fs.Path
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    private = Path_(f"{hdfs_dir}/private")
    fs = private.getFileSystem(conf)  # as the superuser
    assert fs.mkdirs(private)
    fs.setOwner(private, "bob", None)
    fs.setPermission(private, jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o700))
    assert minidfs.shell("-stat", "%u %a", private.toUri().getPath()).stdout.split() == ["bob", "700"]

    alice = hadoop_fs.FileSystem.newInstance(jvm.java.net.URI(minidfs.url), conf, "alice")
    try:
        with pytest.raises(Exception) as failure:
            alice.create(Path_(f"{hdfs_dir}/private/x")).close()
    finally:
        alice.close()
    java_exc = failure.value.java_exception
    assert java_exc.getClass().getName() == "org.apache.hadoop.security.AccessControlException"
    message = java_exc.getMessage()
    assert "Permission denied: user=alice, access=EXECUTE" in message, message
    assert f'inode="{private.toUri().getPath()}":bob:supergroup:drwx------' in message, message


# ---- an isolated standalone cluster


@pytest.fixture(scope="module")
def probe(isolated_cluster, spark, minidfs, tmp_path_factory):
    """One job on the isolated cluster, shared by the tests below (a job costs ~20 s)."""
    tmp = tmp_path_factory.mktemp("probe")
    driver_file = tmp / "written-by-the-driver.txt"
    driver_file.write_text("only the driver can read this")
    hdfs_in, hdfs_out = minidfs.path("/probe/people"), minidfs.path("/probe/people-next-year")
    _people(spark, 2000).repartition(4).write.mode("overwrite").parquet(hdfs_in)
    proc = isolated_cluster.submit([JOBS / "isolation_probe.py", driver_file, hdfs_in, hdfs_out,
                                    isolated_cluster.workers])
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE-RESULT "))
    return {**json.loads(line.removeprefix("PROBE-RESULT ")), "driver_file": str(driver_file),
            "hdfs_out": hdfs_out}


def test_the_isolated_cluster_is_up(isolated_cluster):
    state = isolated_cluster.state()
    assert state["aliveworkers"] == 2 and state["cores"] == 2
    assert isolated_cluster.url.startswith("spark://127.0.0.1:")
    # each worker in a mount namespace of its own, not ours
    ours = Path("/proc/self/ns/mnt").readlink()
    namespaces = {Path(f"/proc/{pid}/ns/mnt").readlink() for pid in isolated_cluster.worker_pids().values()}
    assert len(namespaces) == 2 and ours not in namespaces


def test_executors_do_not_see_the_drivers_tmp_files(probe):
    assert probe["driver_sees_driver_file"] is True
    assert probe["driver_file"].startswith("/tmp/")
    assert {t["executor"] for t in probe["marked"]} == {"0", "1"}, probe["marked"]
    assert [t["sees_driver_file"] for t in probe["marked"]] == [False] * len(probe["marked"])
    # while the repository's venv (here under /work or under /tmp alike) stays visible to them
    assert all(t["sees_venv_python"] for t in probe["marked"])
    # and their HOME is a private one too
    assert {t["home"] for t in probe["marked"]} == {"/tmp/spark-worker/home"} != {probe["driver_home"]}


def test_workers_do_not_see_each_others_tmp_files(probe):
    looked = probe["looked"]
    assert {t["executor"] for t in looked} == {"0", "1"}, looked
    for t in looked:  # each executor sees its own mark only, though both wrote /tmp/tfos-probe-executor-*
        assert t["marks"] == [f"/tmp/tfos-probe-executor-{t['executor']}"], looked
    assert probe["driver_sees_marks"] == []  # and the driver sees neither
    cwds = {t["executor"]: t["cwd"] for t in probe["marked"]}
    assert sorted(c.split("/work-")[1][0] for c in cwds.values()) == ["1", "2"]  # one executor per worker


def test_executors_fetch_each_others_shuffle_blocks_over_the_network(probe, isolated_cluster):
    """Executors on one host would read each other's shuffle files from disk, which the private
    /tmp mounts forbid: the cluster turns spark.shuffle.readHostLocalDisk off for every executor
    (the probe's repartition shuffles between the two)."""
    commands = [line for text in isolated_cluster.executor_logs().values() for line in text.splitlines()
                if line.startswith("Spark Executor Command:")]
    assert commands, isolated_cluster.executor_logs().keys()
    assert all('"-Dspark.shuffle.readHostLocalDisk=false"' in c for c in commands), commands


def test_isolated_executors_read_and_write_hdfs(probe, spark):
    assert probe["hdfs_rows"] == 2000
    assert probe["hdfs_age_sum"] == _expected_age_sum(2000)
    written = spark.read.parquet(probe["hdfs_out"])
    assert written.count() == 2000
    assert written.agg({"age_next_year": "sum"}).first()[0] == _expected_age_sum(2000) + 2000
    assert written.filter("person = 1999").first()["age_next_year"] == 1999 % 70 + 18 + 1


# ---- S3


@pytest.fixture(scope="module")
def s3_job(s3_server, tmp_path_factory):
    """One child Spark session against the S3 server (a session costs ~10 s): a round trip with the
    right credentials, then a read and a write with a wrong secret."""
    url = s3_server.url(f"infra/{tmp_path_factory.mktemp('s3-job').name}/t")
    proc = support.run([sys.executable, JOBS / "s3_roundtrip.py", json.dumps(s3_server.spark_conf()), url],
                       timeout=300, cwd=support.ROOT, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("S3-RESULT ")]
    assert lines, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return {**json.loads(lines[0].removeprefix("S3-RESULT ")), "url": url}


@pytest.mark.slow  # S3 is covered in make test-all, with the whole pipeline on it
def test_spark_writes_and_reads_parquet_on_s3(s3_server, s3_job):
    assert s3_job["round_trip"] == {"rows": 1000, "id_sum": sum(range(1000)), "max_name": "row-999"}, s3_job
    # the server holds the files (listed over its own API, with the generated credentials)
    prefix = s3_job["url"].removeprefix(f"s3a://{s3_server.bucket}/") + "/"
    keys = s3_server.list_keys(prefix)
    assert prefix + "_SUCCESS" in keys
    assert len([k for k in keys if k.endswith(".parquet")]) == 2, keys
    assert s3_server.request("GET", f"/{s3_server.bucket}/{prefix}_SUCCESS", secret_key="wrong")[0] == 403


@pytest.mark.slow
@pytest.mark.parametrize("step", ["wrong_secret_read", "wrong_secret_write"])
def test_s3_with_a_wrong_secret_fails_clearly(s3_server, s3_job, step):
    error = s3_job[step].get("error") if isinstance(s3_job[step], dict) else None
    assert error, f"{step} succeeded: {s3_job[step]}"
    assert error["classes"] == ["java.nio.file.AccessDeniedException",
                                "software.amazon.awssdk.services.s3.model.S3Exception"], error
    assert "getFileStatus on s3a://" in error["messages"][0] and "Status Code: 403" in error["messages"][0], error
    wrong_prefix = s3_job["url"].removeprefix(f"s3a://{s3_server.bucket}/") + "-wrong"
    assert s3_server.list_keys(wrong_prefix) == []  # nothing was written


@pytest.mark.slow  # ~30 s: a job on the isolated cluster
def test_isolated_executors_read_and_write_s3(isolated_cluster, s3_server, s3_dir):
    """spark-submit ships hadoop-aws and the SDK to executors that have no copy of them: the
    jars go with --jars (the TFRecord jar included: a later --jars replaces tfos-submit's)."""
    tfrecord_jar = support.ROOT / "tfos_jobs" / "jars" / "tfos-tfrecord.jar"
    proc = isolated_cluster.submit([*s3_server.submit_args(extra_jars=[tfrecord_jar]),
                                    JOBS / "s3_roundtrip.py", "{}", s3_dir])
    result = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("S3-RESULT "))[10:])
    assert result["round_trip"] == {"rows": 1000, "id_sum": sum(range(1000)), "max_name": "row-999"}, result
    assert result["wrong_secret_read"]["error"]["classes"][0] == "java.nio.file.AccessDeniedException", result
    prefix = s3_dir.removeprefix(f"s3a://{s3_server.bucket}/") + "/"
    assert len([k for k in s3_server.list_keys(prefix) if k.endswith(".parquet")]) == 2
    jars_fetched = [line for text in isolated_cluster.executor_logs().values() for line in text.splitlines()
                    if "Fetching spark://" in line and "hadoop-aws-3.5.0.jar" in line]
    assert jars_fetched, "the executors did not fetch hadoop-aws from the driver"
