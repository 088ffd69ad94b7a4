"""pytest fixtures for the real components: HDFS (MiniDFS), S3 (S3Proxy) and a Spark standalone
cluster whose executors share no disk with the driver.

Use them from any test directory, either for the whole suite, in tests/conftest.py:

    pytest_plugins = ["tests.hadoop.fixtures"]

or in one module (or a directory's conftest.py):

    from tests.hadoop.fixtures import minidfs, hdfs_dir, s3_server, isolated_cluster  # noqa: F401

Each service is started once per test process and shared, however many modules import the
fixtures (a pytest fixture imported into two modules would otherwise be set up twice): the first
user starts it, and it stops when the session ends (at the latest when the process exits; a
killed process takes MiniDFS and S3Proxy with it through PDEATHSIG, and the cluster's reaper
stops the cluster).

    minidfs           session  tests.hadoop.minidfs.MiniDFS, running: .url (hdfs://127.0.0.1:PORT),
                               .path("/p"), .conf_dir, .spark_conf(), .shell("-ls", "/")
    hdfs_dir          function a fresh hdfs://127.0.0.1:PORT/tests/NAME-N URL (not created yet) per test
    s3_server         session  tests.hadoop.s3.S3Server, running: .endpoint, .access_key, .secret_key,
                               .bucket, .url("key"), .spark_conf(), .submit_args(), .jars(), .list_keys()
    s3_dir            function a fresh s3a://BUCKET/tests/NAME-N URL per test
    isolated_cluster  session  tests.hadoop.isolated.IsolatedCluster, running: 2 isolated workers, 1 core
                               and 1536m each; .url (spark://...), .submit([...]), .tfos([...]),
                               .executor_conf, .env(), .executor_logs(), .state()
    yarn_cluster      session  tests.hadoop.yarn.YarnCluster, running: HDFS and YARN (one NodeManager of
                               8 GB); .hdfs, .path("/p"), .submit([JOB, ...], deploy_mode=...),
                               .applications(), .container_pids(app), .container_logs()
    yarn_env_archive  session  this venv packed by `tfos pack-env`, on the YARN cluster's HDFS (public):
                               the URL for `tfos submit --env-archive`
"""
from __future__ import annotations

import atexit
import itertools
import re
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

from tests.hadoop.isolated import IsolatedCluster
from tests.hadoop.minidfs import MiniDFS
from tests.hadoop.s3 import S3Server
from tests.hadoop.yarn import YarnCluster

_shared: dict[str, list] = {}  # name -> [service, number of fixture instances using it]
_counter = itertools.count(1)


@contextmanager
def shared(name: str, make: Callable[[], object]) -> Iterator:
    """One running service per process under `name`, started by `make()` (which must return it
    started) on first use, stopped when its last user is done."""
    entry = _shared.get(name)
    if entry is None:
        service = make()
        atexit.register(service.stop)
        entry = _shared[name] = [service, 0]
    entry[1] += 1
    try:
        yield entry[0]
    finally:
        entry[1] -= 1
        if entry[1] == 0:
            del _shared[name]
            entry[0].stop()


def _unique(request) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', request.node.name)[:60]}-{next(_counter)}"


@pytest.fixture(scope="session")
def minidfs(tmp_path_factory) -> Iterator[MiniDFS]:
    with shared("minidfs", lambda: MiniDFS(tmp_path_factory.mktemp("minidfs")).start()) as dfs:
        yield dfs


@pytest.fixture
def hdfs_dir(minidfs, request) -> str:
    return minidfs.path(f"/tests/{_unique(request)}")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    with shared("s3_server", lambda: S3Server(tmp_path_factory.mktemp("s3proxy")).start()) as s3:
        yield s3


@pytest.fixture
def s3_dir(s3_server, request) -> str:
    return s3_server.url(f"tests/{_unique(request)}")


@pytest.fixture(scope="session")
def isolated_cluster(tmp_path_factory) -> Iterator[IsolatedCluster]:
    with shared("isolated_cluster",
                lambda: IsolatedCluster(tmp_path_factory.mktemp("isolated-cluster")).start()) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def yarn_cluster(tmp_path_factory) -> Iterator[YarnCluster]:
    with shared("yarn_cluster", lambda: YarnCluster(tmp_path_factory.mktemp("yarn")).start()) as yarn:
        yield yarn


@pytest.fixture(scope="session")
def yarn_env_archive(request, tmp_path_factory) -> str:
    """Packed while the YARN cluster starts (a minute each, on different cores), then uploaded."""
    from concurrent.futures import ThreadPoolExecutor

    from tfos_jobs.deploy import env_archive

    local = tmp_path_factory.mktemp("env-archive") / "tfos-env.tar"  # uncompressed: on loopback, quicker
    with ThreadPoolExecutor(1) as pool:
        packed = pool.submit(env_archive.pack, local, log=lambda line: None)
        yarn = request.getfixturevalue("yarn_cluster")
        packed.result()
    remote = yarn.upload_public(local, "/envs")
    local.unlink()
    return remote
