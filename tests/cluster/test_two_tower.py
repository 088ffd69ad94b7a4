"""A two-tower model with its own contrastive loss (examples/two_tower.py) on the Tate collection, trained by a training
function on a real local-cluster: Keras fit with the model's train_step and a tf.GradientTape loop, under
multi_worker_mirrored and parameter_server; the exported matcher served in SQL by its signature must rank an artwork's
own tags above another's. Killed executors: tests/reliability/test_training_faults.py."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import functions as F

from tests.cluster.test_training import assert_no_node_process_left, metrics
from tests.conftest import ROOT
from udfs import register

TATE = ROOT / "conf" / "tate.toml"
BIN = Path(sys.executable).parent
EXAMPLES = f"{ROOT}{os.pathsep}{ROOT / 'examples'}"  # the driver imports two_tower from here; the executors get it
TWO_WORKERS = ("spark.master=local-cluster[2,1,1536]",)
PARAMETER_SERVER = ("spark.master=local-cluster[3,1,1536]", "train.strategy=parameter_server", "train.workers=1",
                    "train.ps=1")
BATCH = 128
RANDOM_TOP1 = 1 / BATCH  # picking an artwork's own tags among a batch's by chance


def prepare_tate(spark, root: Path) -> Path:
    """conf/tate.toml's dataset (18,466 train rows) under `root`."""
    from tfos_jobs import config
    from tfos_jobs.jobs import prepare

    prepare.run(spark, config.load(TATE, [f"prepare.output={root / 'dataset'}"]))
    return root / "dataset"


def two_tower_command(dataset: Path, model_dir: Path, *overrides: str) -> list[str]:
    """`tfos train --config conf/tate.toml` with a two-tower function (a later --set wins)."""
    sets = [f"train.dataset={dataset}", f"train.model_dir={model_dir}", "train.epochs=3", f"train.batch_size={BATCH}",
            "train.tensorboard=false", "train.reservation_timeout=90", "spark.conf.spark.ui.showConsoleProgress=false",
            f"spark.conf.spark.executorEnv.PYTHONPATH={ROOT}", *overrides]
    return ["env", f"PYTHONPATH={EXAMPLES}", str(BIN / "tfos"), "train", "--config", str(TATE),
            *[a for s in sets for a in ("--set", s)]]


@pytest.fixture(scope="module")
def tate(spark, tmp_path_factory):
    return prepare_tate(spark, tmp_path_factory.mktemp("two-tower"))


@pytest.mark.slow  # the dataset's preparation (30 s), then 60 to 100 s each: `make test-all`
@pytest.mark.parametrize("fn, settings, roles", [
    ("fit", TWO_WORKERS, ["chief", "worker"]),
    ("loop", TWO_WORKERS, ["chief", "worker"]),
    ("fit", PARAMETER_SERVER, ["chief", "ps", "worker"]),
    ("loop", PARAMETER_SERVER, ["chief", "ps", "worker"]),
], ids=["fit", "loop", "fit-parameter-server", "loop-parameter-server"])
def test_a_two_tower_model_trains_with_its_contrastive_loss_and_serves_in_sql(spark, tate, tmp_path, fn, settings,
                                                                             roles):
    model_dir = tmp_path / "model"
    proc = subprocess.run(two_tower_command(tate, model_dir, f"train.fn=two_tower:{fn}", "train.checkpoint_steps=20",
                                            *settings), capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    m = metrics(model_dir)
    assert sorted(n["role"] for n in m["nodes"]) == roles and m["attempts"] == 1
    assert m["model"]["kind"] == f"two_tower:{fn}"
    assert [e["epoch"] for e in m["history"]] == [1, 2, 3]
    lines = re.findall(r"epoch   \d/3 \[#+\.*\] loss (\S+) .*val_top1 (\S+)", proc.stdout)
    assert len(lines) == 3, proc.stdout[-2000:]
    assert float(lines[-1][0]) < float(lines[0][0])  # the contrastive loss falls
    assert m["eval"]["top1"] > 10 * RANDOM_TOP1, m["eval"]  # its own tags first among the batch's 128
    assert_matcher_serves_in_sql(spark, model_dir)
    assert_no_node_process_left(m)


def assert_matcher_serves_in_sql(spark, model_dir: Path) -> None:
    """`match(...)` registered by its signature scores the eval split's artworks as the SavedModel does, and ranks an
    artwork's own subjects and movements above another's (AUC of own pairs against swapped ones; the other is 300
    accession numbers away: a neighbour is often from the same series, with the same tags)."""
    import tensorflow as tf
    from sklearn.metrics import roc_auc_score

    register(spark, "match", str(model_dir), signature="serving_default")
    artworks = (spark.read.parquet(str(ROOT / "data" / "tate" / "tate.parquet")).where("subset = 'eval'")
                .orderBy("acno").limit(600)
                .select(F.coalesce("title", F.lit("")).alias("title"), F.coalesce("medium", F.lit("")).alias("medium"),
                        F.array_join("subjects", "|").alias("subjects"), F.array_join("movements", "|").alias("movements"))
                .toPandas())
    swapped = artworks.assign(subjects=np.roll(artworks.subjects, 300), movements=np.roll(artworks.movements, 300))
    both = spark.createDataFrame(artworks.assign(own=1)._append(swapped.assign(own=0), ignore_index=True))
    got = both.select("own", "title", "medium", "subjects", "movements",
                      F.expr("match(struct(title, medium, subjects, movements)) AS m")).toPandas()
    assert got.m.notna().all()
    scores = np.array([m["score"] for m in got.m])
    auc, lexical = roc_auc_score(got.own, scores), roc_auc_score(got.own, word_overlap(got))
    print(f"own tags ranked above another artwork's: AUC {auc:.4f}; the words they share: {lexical:.4f}")
    assert auc > max(lexical, 0.8)  # the baseline a data scientist tries first: about 0.83
    serve = tf.saved_model.load(str(model_dir / "saved_model")).signatures["serving_default"]
    direct = serve(**{c: tf.constant(got[c].tolist()) for c in ("title", "medium", "subjects", "movements")})
    np.testing.assert_allclose(scores, direct["score"].numpy(), atol=1e-5)
    np.testing.assert_allclose(np.stack([m["query"] for m in got.m]), direct["query"].numpy(), atol=1e-5)
    assert json.loads((model_dir / "metrics.json").read_text())["final"]


def word_overlap(pairs) -> list[float]:
    """The share of a candidate's words (its tags' and movements') found in the artwork's title and medium."""
    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z]+", text.lower()))

    shared = []
    for title, medium, subjects, movements in zip(pairs.title, pairs.medium, pairs.subjects, pairs.movements):
        candidate = words(f"{subjects} {movements}".replace("|", " "))
        shared.append(len(candidate & (words(title) | words(medium))) / (len(candidate) or 1))
    return shared
