"""The Python API from a Spark Connect client, and the same calls from a classic session.

A real Connect server (`tfos connect-server`, on a local-cluster of three executors) serves a
client process that has no JVM (checked): it prepares from DataFrames it holds, trains with two
multi_worker_mirrored workers and with a parameter server, registers the model and queries it in
SQL over rows it uploaded, runs `tfos predict`, a two-trial sweep, and a stream over a real
Kafka broker (tests/connect/client.py). The nodes reach the client's control server through the
driver's relay. The same program runs again in a classic session on a local-cluster (`make test-all`: each of
its steps has its own classic test too)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.connect.client import BAG_SCORED, PEOPLE, STEPS
from tests.connect.conftest import MASTER

pytestmark = pytest.mark.kafka


def run_client(tmp_path: Path, *args: str) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-m", "tests.connect.client", "--work", str(tmp_path / "work"), *args],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)})
    steps = {}
    for line in proc.stdout.splitlines():
        if line.startswith('{"step"'):
            record = json.loads(line)
            record.pop("seconds")
            steps[record.pop("step")] = record
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return steps


@pytest.mark.slow  # every step of the API from a client, about 4 minutes: `make test-all`; `make test` runs the next one
@pytest.mark.parametrize("mode", ["connect", "classic"])
def test_every_step_of_the_api_runs_from_a_connect_client_as_from_a_classic_session(mode, request, kafka, tmp_path):
    where = ["--url", request.getfixturevalue("connect_server")] if mode == "connect" else ["--master", MASTER]
    steps = run_client(tmp_path, *where, "--kafka", kafka.bootstrap,
                       "--steps", ",".join(s for s in STEPS if s != "bags"))

    assert steps["data"]["counts"]["people"] == PEOPLE
    assert sum(steps["prepare"]["splits"].values()) == PEOPLE
    train = steps["train"]
    assert train["strategy"] == "multi_worker_mirrored" and sorted(train["nodes"]) == ["chief", "worker"]
    assert train["auc"] > 0.7 and {"saved_model", "metrics.json", "progress.jsonl"} <= set(train["files"])

    sql = steps["sql"]
    assert sql["rows"] == sql["people"] == 200
    assert all(0.0 <= p <= 1.0 for p in sql["probabilities"]) and len(set(sql["probabilities"])) > 10
    assert set(sql["labels"]) <= {"<=50K", ">50K"}
    assert "predict_income" in sql["refused"] and "the struct lacks" not in sql["refused"], sql["refused"]
    assert "23 arguments" in sql["refused"] or "argument" in sql["refused"]

    predict = steps["predict"]
    assert predict["exit"] == 0, predict["stderr"]
    assert predict["summary"]["rows"] == PEOPLE
    # the command from a Connect client; api.predict in the classic session: it returns what it records
    assert predict["returned"] == (None if mode == "connect" else predict["summary"])

    assert sorted(steps["ps"]["nodes"]) == ["chief", "ps", "worker"] and steps["ps"]["auc"] > 0.6
    sweep = steps["sweep"]
    assert sweep["statuses"] == ["completed", "completed"] and sweep["best"] in (1, 2) and sweep["best_model"]

    stream = steps["stream"]
    assert stream["sent"] == stream["scored"] == stream["distinct"] == 400
    assert stream["batches"] >= 2 and stream["stopped_by"].startswith("no event"), stream  # 200 events a batch at most

    if mode == "connect":
        assert steps["jvm"] == {"gateway": False, "java_children": []}


def test_texts_lists_and_vectors_are_prepared_trained_and_scored_in_sql_from_a_connect_client(connect_server, tmp_path):
    """A client without a JVM holds a table of texts, lists, a vector and a hashed id: it prepares it, trains on it (one
    process) and scores rows it uploaded with `predict_kinds(struct(*))`, the SavedModel's numbers, in a Python worker
    and inside the executor JVM; serves a SavedModel of its own by its signature; and fits, saves, loads and applies a
    Spark ML Pipeline with TFEstimator."""
    import numpy as np
    import tensorflow as tf

    from tests.spark.test_kinds_pipeline import table

    steps = run_client(tmp_path, "--url", connect_server, "--steps", "bags,foreign,ml,jvm")
    bags = steps["bags"]
    assert bags["vocabularies"] == ["clicked", "review", "tags"]  # the hashed id has none
    got = {int(k): p for k, p in bags["probabilities"].items()}
    rows = table(BAG_SCORED, seed=2)
    assert sorted(got) == [r[0] for r in rows]
    pad = lambda values, width: (list(map(str, values)) + [""] * width)[:width]  # noqa: E731
    serve = tf.saved_model.load(bags["saved_model"].removeprefix("file:")).signatures["serving_default"]
    expected = serve(review=tf.constant([r[1] for r in rows]), tags=tf.constant([pad(r[2], 4) for r in rows]),
                     clicked=tf.constant([pad(r[3], 3) for r in rows]),
                     emb=tf.constant([r[4] for r in rows], tf.float32),
                     user=tf.constant([r[5] for r in rows]))["probability"].numpy()
    np.testing.assert_allclose([got[r[0]] for r in rows], expected, atol=1e-6)
    # the same function inside the executor JVM (engine "jvm", registered from the client): the same labels, the
    # probabilities within 1e-5
    assert bags["jvm_engine"] == "jvm"
    in_jvm = {int(k): v for k, v in bags["jvm"].items()}
    assert sorted(in_jvm) == sorted(got)
    assert {k: v[1] for k, v in in_jvm.items()} == {int(k): v for k, v in bags["labels"].items()}
    np.testing.assert_allclose([in_jvm[k][0] for k in sorted(got)], [got[k] for k in sorted(got)], atol=1e-5)
    # a SavedModel tfos did not export, served by its signature: a null argument gives a null result
    assert steps["foreign"]["totals"] == [5.0, 6.0, None]
    # a Pipeline with TFEstimator fitted, saved, loaded and applied from the client, as from a classic session
    assert steps["ml"]["rows"] == 1200 and steps["ml"]["same"] and steps["ml"]["accuracy"] > 0.8, steps["ml"]
    assert steps["jvm"] == {"gateway": False, "java_children": []}
