"""The sensor-window autoencoder trained on a real local-cluster (two TFoS workers under
MultiWorkerMirrored), exported, and served: the SQL UDF's struct of outputs equals the
SavedModel's own outputs on the same windows, from raw windows and from SequenceExamples."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import functions as F

from tfos_jobs import config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.data import fleet
from tfos_jobs.data.sensor_sources import window_table
from tfos_jobs.features.standardisation import STATS_PER_ASSET
from tfos_jobs.jobs import prepare

from tests.conftest import ROOT

FLEET = ROOT / "conf" / "fleet.toml"
BIN = Path(sys.executable).parent


def fleet_overrides(root: Path) -> list[str]:
    sensors = root / "raw" / fleet.SENSORS_DIR
    return [f"sources.sensors.path={sensors}", f"sources.sensors_csv.path={sensors}",
            f"prepare.output={root / 'dataset'}", "prepare.files_per_split=2", "prepare.split.eval_fraction=0.45",
            f"train.dataset={root / 'dataset'}", f"train.model_dir={root / 'model'}", f"predict.model={root / 'model'}",
            "train.epochs=2", "train.batch_size=32", "train.model.units=8", "train.model.latent_dim=4",
            "train.reservation_timeout=60", "train.tensorboard=false", "spark.conf.spark.ui.showConsoleProgress=false"]


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet-train")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    fleet.generate(str(root / "raw"), 6, 1200, seed=9, csv_every=3)
    overrides = fleet_overrides(root)
    cfg = config.load(FLEET, overrides)
    prepare.run(spark, cfg, log=lambda _: None)
    cmd = [str(BIN / "tfos"), "train", "--config", str(FLEET), *[a for s in overrides for a in ("--set", s)],
           "--set", "spark.master=local-cluster[2,1,1536]"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "cuInit" not in proc.stdout + proc.stderr  # no GPU here: TensorFlow's probe stays quiet
    return cfg, root / "model", proc.stdout


def test_two_workers_train_and_export_with_a_threshold(trained):
    cfg, model_dir, stdout = trained
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["strategy"] == "multi_worker_mirrored" and len(metrics["nodes"]) == 2
    assert metrics["epochs"] == 2 and "epoch   2/2" in stdout and "val_loss" in stdout
    assert metrics["anomaly"]["quantile"] == cfg.train.model.anomaly_quantile and metrics["anomaly"]["threshold"] > 0
    # an asset's own threshold needs 1 / (1 - quantile) of its train windows; here each has about 18
    assert metrics["anomaly"]["thresholds"] == {}
    assert (model_dir / "learning_curve.png").stat().st_size > 0


def test_udf_scores_equal_the_saved_models_outputs(spark, trained):
    import tensorflow as tf

    from udfs import register

    cfg, model_dir, _ = trained
    spec = cfg.features
    windows = window_table(spark, cfg, spec).orderBy("asset_id", "window_start").limit(100).cache()
    udf = register(spark, "score_windows", str(model_dir), batch_size=64)
    windows.createOrReplaceTempView("test_windows")
    rows = spark.sql("SELECT *, score_windows(struct(*)) AS s FROM test_windows").toPandas()
    assert len(rows) == 100 and udf.counts()["rows"] == 100

    loaded = tf.saved_model.load(str(model_dir / "saved_model"))
    serving = loaded.signatures[contract.SERVING_SIGNATURE]
    sensors = [f.name for f in spec.sequences]
    inputs = {n: tf.constant(np.stack(rows[n].to_list()).astype(np.float32)) for n in sensors}
    inputs["asset_id"] = tf.constant(rows["asset_id"].to_list())
    expected = serving(**inputs)
    got = rows["s"]
    np.testing.assert_allclose([s[contract.RECONSTRUCTION_ERROR] for s in got],
                               expected[contract.RECONSTRUCTION_ERROR].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.stack([s[contract.LATENT] for s in got]), expected[contract.LATENT].numpy(),
                               rtol=1e-5, atol=1e-6)
    assert [s[contract.IS_ANOMALY] for s in got] == expected[contract.IS_ANOMALY].numpy().tolist()
    anomaly = json.loads((model_dir / "metrics.json").read_text())["anomaly"]
    thresholds = [anomaly["thresholds"].get(a, anomaly["threshold"]) for a in rows["asset_id"]]
    errors = expected[contract.RECONSTRUCTION_ERROR].numpy()
    assert (errors > np.array(thresholds)).tolist() == expected[contract.IS_ANOMALY].numpy().tolist()
    # the split is by asset: windows of an eval asset are of an asset unseen in training, and counted
    stats = json.loads((model_dir / "saved_model" / "assets" / "stats.json").read_text())
    trained_on = stats["asset_id"][STATS_PER_ASSET]
    unseen = int((~rows["asset_id"].isin(list(trained_on))).sum())
    assert 0 < unseen < 100 and udf.counts()[contract.count_key(contract.COUNT_UNSEEN, "asset_id")] == unseen

    # the same windows from the prepared SequenceExamples through predict_examples
    records = list(tf.data.TFRecordDataset(sorted(glob.glob(str(Path(cfg.prepare.output) / "train" / "*"))))
                   .as_numpy_iterator())
    context, lists = spec.sequence_parse_spec()
    ctx, seq, _ = tf.io.parse_sequence_example(records, context_features=context, sequence_features=lists)
    by_examples = loaded.signatures[contract.EXAMPLES_SIGNATURE](examples=tf.constant(records))
    by_columns = serving(asset_id=ctx["asset_id"], **{n: seq[n] for n in sensors})
    np.testing.assert_allclose(by_examples[contract.RECONSTRUCTION_ERROR].numpy(),
                               by_columns[contract.RECONSTRUCTION_ERROR].numpy(), rtol=1e-6)
    assert len(ctx["asset_id"]) > 0


def test_a_short_window_is_an_error_naming_the_column(spark, trained):
    from pyspark.errors import PythonException

    from udfs import register

    cfg, model_dir, _ = trained
    register(spark, "score_windows", str(model_dir))
    short = window_table(spark, cfg, cfg.features).limit(2).withColumn("rpm", F.slice("rpm", 1, 10))
    with pytest.raises(PythonException, match="column 'rpm' \\(sequence feature\\): the model takes windows of 64"):
        short.select(F.expr("score_windows(struct(*))")).collect()


def test_an_asset_unseen_in_training_is_scored_with_the_fleets_statistics_and_counted(spark, trained):
    import tensorflow as tf

    from udfs import register

    cfg, model_dir, _ = trained
    stats = json.loads((model_dir / "saved_model" / "assets" / "stats.json").read_text())
    known = sorted(stats["asset_id"][STATS_PER_ASSET])
    windows = window_table(spark, cfg, cfg.features).where(F.col("asset_id") == known[0]) \
        .orderBy("window_start").limit(20)
    renamed = windows.withColumn("asset_id", F.lit("asset-never-seen")).unionByName(windows).cache()
    udf = register(spark, "score_windows", str(model_dir), batch_size=64)
    rows = renamed.select("asset_id", *[f.name for f in cfg.features.sequences],
                          udf().alias("s")).toPandas()
    unseen = (rows["asset_id"] == "asset-never-seen").to_numpy()
    n = int(unseen.sum())
    assert n >= 10 and udf.counts()[contract.count_key(contract.COUNT_UNSEEN, "asset_id")] == n
    serving = tf.saved_model.load(str(model_dir / "saved_model")).signatures[contract.SERVING_SIGNATURE]
    sensors = {f.name: tf.constant(np.stack(rows[f.name][unseen].to_list()).astype(np.float32))
               for f in cfg.features.sequences}
    as_fleet = serving(asset_id=tf.constant(["not-in-training"] * n), **sensors)[contract.RECONSTRUCTION_ERROR].numpy()
    as_itself = serving(asset_id=tf.constant([known[0]] * n), **sensors)[contract.RECONSTRUCTION_ERROR].numpy()
    got = np.array([s[contract.RECONSTRUCTION_ERROR] for s in rows["s"]])
    np.testing.assert_allclose(got[unseen], as_fleet, rtol=1e-5)
    np.testing.assert_allclose(got[~unseen], as_itself, rtol=1e-5)
    assert not np.allclose(as_fleet, as_itself, rtol=1e-3)  # the asset's own statistics are not the fleet's


def test_jvm_engine_scores_every_window_as_the_python_udf(spark, trained):
    """TensorFlow Java in the executor JVM (`predict.engine = "jvm"`) on every window: the Python UDF's latent
    vectors and errors within 1e-5, the same anomaly flags and counters, and no Python in the plan."""
    from udfs import jvm_engine, register

    cfg, model_dir, _ = trained
    windows = window_table(spark, cfg, cfg.features).cache()
    python = register(spark, "fleet_py", str(model_dir), batch_size=256)
    jvm = register(spark, "fleet_jvm", str(model_dir), batch_size=256, engine="jvm")
    scored = jvm(*[F.col(n) for n in jvm.spec.model_inputs])
    plan = windows.select(scored.alias("j"))._jdf.queryExecution().executedPlan().toString()
    assert "TFBatchEval" in plan and "Python" not in plan, plan
    rows = windows.select(python().alias("p"), scored.alias("j")).collect()
    assert len(rows) == windows.count() > 100
    assert jvm_engine.compare([r.p for r in rows], [r.j for r in rows], contract.AUTOENCODER) is None
    assert sum(r.j.is_anomaly for r in rows) == sum(r.p.is_anomaly for r in rows)
    latent = np.array([r.j.latent for r in rows])
    assert latent.shape == (len(rows), cfg.train.model.latent_dim) and np.abs(latent).sum() > 0
    assert jvm.counts() == python.counts() and jvm.counts()["rows"] == len(rows)
    windows.unpersist()
