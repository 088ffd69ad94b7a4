"""The whole pipeline on a Spark standalone cluster started by scripts/standalone-cluster: a real
master and 3 worker daemons on 127.0.0.1, jobs submitted with scripts/tfos-submit --master spark://...

Run with -s to see the timings of each step."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CENSUS, ROOT, census_overrides

pytestmark = pytest.mark.slow  # about 3 minutes: run by `make test-all`

BIN = Path(sys.executable).parent
CLUSTER = ROOT / "scripts" / "standalone-cluster"
SUBMIT = ROOT / "scripts" / "tfos-submit"
PEOPLE = 4000
WORKERS, CORES, MEMORY = 3, 1, "1536m"
# one task slot per executor, as TensorFlowOnSpark needs; the heap fits a 1536m worker
EXECUTOR_CONF = ["--conf", "spark.executor.cores=1", "--conf", "spark.task.cpus=1", "--conf", "spark.executor.memory=1g"]

timings: dict[str, float] = {}


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "TFOS_VENV": str(BIN.parent), "TF_USE_LEGACY_KERAS": "1", "SPARK_LOCAL_IP": "127.0.0.1"}


def run(cmd: list, what: str, expect: int = 0) -> subprocess.CompletedProcess:
    started = time.monotonic()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=_env(), timeout=600, cwd=ROOT)
    timings[what] = time.monotonic() - started
    print(f"\n[standalone] {what}: {timings[what]:.1f} s", flush=True)
    assert proc.returncode == expect, (
        f"{what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


@dataclass
class Cluster:
    run_dir: Path
    url: str
    webui: str

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=10) as r:
            return json.load(r)


def cluster_processes(run_dir: Path) -> list[str]:
    """Processes of this cluster: the daemons and executors (RUN_DIR/conf is on their class path,
    the workers' --work-dir is under RUN_DIR) and anything working in a worker directory."""
    found = subprocess.run(["pgrep", "-af", f"{run_dir}/"], capture_output=True, text=True).stdout.splitlines()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "cwd").startswith(f"{run_dir}/work-"):
                    found.append(f"{proc.name} (cwd {os.readlink(proc / 'cwd')})")
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("standalone")
    try:
        proc = run([CLUSTER, "start", run_dir, WORKERS, CORES, MEMORY], "cluster start")
        url = proc.stdout.strip().splitlines()[-1]
        assert url.startswith("spark://127.0.0.1:")
        assert (run_dir / "master-url").read_text().strip() == url
        yield Cluster(run_dir, url, (run_dir / "master-webui").read_text().strip())
    finally:
        stop = subprocess.run([str(CLUSTER), "stop", str(run_dir)], capture_output=True, text=True,
                              env=_env(), timeout=120)
        print(f"\n[standalone] fixture teardown: {stop.stdout.strip()} {stop.stderr.strip()}", flush=True)


def test_pipeline_on_a_standalone_cluster(cluster, tmp_path):
    raw, dataset, model, predictions = (tmp_path / d for d in ("raw", "dataset", "model", "predictions"))
    # (the config's [spark.conf] is applied over spark-submit's --conf, so its keys are set with --set)
    data_sets = [*census_overrides(raw, dataset, people=PEOPLE, master="local[1]"), "synthetic.events_per_person=5",
                 "spark.conf.spark.ui.showConsoleProgress=false"]
    sets = [a for s in data_sets for a in ("--set", s)]
    state = cluster.state()
    assert state["aliveworkers"] == WORKERS and state["cores"] == WORKERS * CORES
    already_done = len(state["completedapps"])

    gen = run([BIN / "tfos", "generate", "--config", CENSUS, *sets], "generate (local[1])")
    assert f"people {PEOPLE:,} rows" in gen.stdout

    prep = run([SUBMIT, "--master", cluster.url, *EXECUTOR_CONF, "tfos_jobs/entrypoints/prepare.py", "--config", CENSUS, *sets],
               "prepare (spark-submit)")
    manifest = json.loads((dataset / "_meta" / "manifest.json").read_text())
    splits = manifest["splits"]
    assert manifest["sources"]["people"]["rows"] == PEOPLE
    assert splits["train"]["records"] + splits["eval"]["records"] == PEOPLE - manifest["rejected"]["rows"]
    assert splits["train"]["records"] > 3 * splits["eval"]["records"] > 0
    assert len(splits["train"]["files"]) == len(splits["eval"]["files"]) == 4
    assert manifest["spark"]["master"] == cluster.url
    assert f"train {splits['train']['records']:,} in 4 files" in prep.stdout

    # 2 TF workers (one the chief) on exactly 2 executors: spark.cores.max caps the application at 2
    # one-core executors, so that the third worker stays free
    train = run([SUBMIT, "--master", cluster.url, *EXECUTOR_CONF, "--conf", "spark.cores.max=2",
                 "tfos_jobs/entrypoints/train.py", "--config", CENSUS, "--set", "spark.conf.spark.ui.showConsoleProgress=false",
                 "--set", f"train.dataset={dataset}", "--set", f"train.model_dir={model}",
                 "--set", "train.strategy=multi_worker_mirrored", "--set", "train.workers=2",
                 "--set", "train.epochs=2", "--set", "train.batch_size=64", "--set", "train.learning_rate=0.003",
                 "--set", "train.reservation_timeout=300", "--set", "train.tensorboard=false"],
                "train (spark-submit, multi_worker_mirrored x2)")
    m = json.loads((model / "metrics.json").read_text())
    print(f"[standalone] eval: {m['eval']}; nodes: {[(n['role'], n['executor_id']) for n in m['nodes']]}")
    assert m["eval"]["auc"] > 0.75, m["eval"]
    assert [n["role"] for n in m["nodes"]] == ["chief", "worker"]
    assert len({n["executor_id"] for n in m["nodes"]}) == 2
    assert "epoch   2/2 [" in train.stdout
    assert (model / "saved_model" / "saved_model.pb").exists()

    run([SUBMIT, "--master", cluster.url, *EXECUTOR_CONF, "--conf", "spark.cores.max=2",
         "tfos_jobs/entrypoints/predict.py", "--config", CENSUS, *sets,
         "--set", f"predict.model={model}", "--set", f"predict.output={predictions}"],
        "predict (spark-submit)")
    import pyarrow.parquet as pq

    table = pq.read_table(predictions)
    assert table.num_rows == PEOPLE
    assert {"predicted_probability", "predicted_label"} <= set(table.column_names)
    probs = table.column("predicted_probability").to_pylist()
    assert all(0.0 <= p <= 1.0 for p in probs)
    assert set(table.column("predicted_label").to_pylist()) <= {">50K", "<=50K"}

    # the master saw the three applications through to the end
    deadline = time.monotonic() + 60
    while True:
        state = cluster.state()
        apps = sorted(state["completedapps"], key=lambda a: a["starttime"])[already_done:]
        if (len(apps) >= 3 and all(a["state"] == "FINISHED" for a in apps)) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [a["state"] for a in apps] == ["FINISHED"] * 3, apps
    assert not state["activeapps"]
    assert state["aliveworkers"] == WORKERS
    # the executors ran in the workers' directories; the train job's on two different workers
    prepare_app, train_app, predict_app = (a["id"] for a in apps)
    workers_of = lambda app: {p.parts[-4] for p in cluster.run_dir.glob(f"work-*/{app}/*/stderr")}  # noqa: E731
    assert len(workers_of(prepare_app)) == WORKERS
    assert len(workers_of(train_app)) == 2
    assert len(workers_of(predict_app)) == 2
    print("\n[standalone] timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
          + f"; total {sum(timings.values()):.0f} s", flush=True)


def test_status_then_stop_leaves_no_process(cluster):
    status = run([CLUSTER, "status", cluster.run_dir], "status")
    assert status.stdout.strip().splitlines()[-1] == "running"
    assert f"{WORKERS} workers ALIVE" in status.stdout
    assert len(cluster_processes(cluster.run_dir)) >= 1 + WORKERS

    stop = run([CLUSTER, "stop", cluster.run_dir], "stop")
    assert "stopped" in stop.stdout
    assert not (cluster.run_dir / "pids").exists()
    deadline = time.monotonic() + 10
    while cluster_processes(cluster.run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster_processes(cluster.run_dir) == []

    after = run([CLUSTER, "status", cluster.run_dir], "status after stop", expect=3)
    assert "not running" in after.stdout
