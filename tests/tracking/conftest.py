from __future__ import annotations

import os

import pytest

from tests.tracking.server import QUIET, MlflowServer


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    os.environ.update(QUIET)  # this process is MLflow's client
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()
