"""A real MLflow tracking server for the tests: `mlflow server` on 127.0.0.1 from its own venv
(.cache/mlflow-server, made by `make test-servers`), a SQLite backend and a local artifact root,
telemetry and the server's job runner off; its whole process group is stopped at the end."""
from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

from tests.conftest import ROOT
from tests.hadoop.support import free_port, kill_group, spawn, tail

SERVER_BIN = ROOT / ".cache" / "mlflow-server" / "bin" / "mlflow"
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


class MlflowServer:
    def __init__(self, root: Path):
        if not SERVER_BIN.exists():
            raise RuntimeError(f"{SERVER_BIN} is missing: run `make test-servers` (it installs the MLflow server)")
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env.update(QUIET, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        self.proc = spawn([SERVER_BIN, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                           "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
                           "--artifacts-destination", str(root / "artifacts")], self.log, env=env, cwd=root)
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f"the MLflow server did not start:\n{tail(self.log)}")
            time.sleep(0.5)

    def stop(self) -> None:
        kill_group(self.proc, grace=10)
