"""A user's own sensor table, as `conf/sensors.toml` describes it: one table of many machines in
the layouts such tables come in (one Parquet file, a date-partitioned directory, a catalog table),
few machines (so the hash split alone would leave eval empty), a pandas file with nanosecond
times, and anomaly intervals that the eval machines may not have. Prepare, train, predict and
evaluate run on each as a user would run them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.data import baselines, vus
from tfos_jobs.data import split as split_mod
from tfos_jobs.data.sensor_sources import window_table
from tfos_jobs.jobs.serve import evaluate as anomaly_report
from tfos_jobs.jobs.serve import predict
from tfos_jobs.jobs import prepare
from tfos_jobs.jobs.train.driver import job as train
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import WINDOW_START

from tests.conftest import ROOT

SENSORS = ROOT / "conf" / "sensors.toml"
BIN = Path(sys.executable).parent
MACHINES, STEPS = 6, 600  # 23 windows of 50 steps, one every 25, per machine
START = pd.Timestamp("2026-01-01 23:55:00")  # the rows cross midnight: two date partitions
TABLE = "plant_readings"


def machine_names(spark, count: int) -> list[str]:
    """`count` names the salted hash puts in train at eval_fraction 0.2: the split by hash alone
    would leave eval without any machine."""
    split = config.load(SENSORS).prepare.split
    names = spark.createDataFrame([(f"press-{i:02d}",) for i in range(200)], "machine string")
    buckets = names.select("machine", split_mod.bucket(split, "machine").alias("b")).toPandas()
    train_only = buckets[buckets["b"] >= split_mod.nominal_boundary(split)].sort_values("machine")
    return train_only["machine"].head(count).tolist()


def readings(names: list[str], anomalous: set[str]) -> pd.DataFrame:
    """One row per machine and second: a periodic signal with noise (nanosecond times, as pandas
    makes them), and 40 s of triple amplitude on the `anomalous` machines."""
    rng = np.random.default_rng(7)
    t = np.arange(STEPS)
    frames = []
    for i, name in enumerate(names):
        signal = np.sin(2 * np.pi * t / 20) + 0.3 * np.sin(2 * np.pi * t / 7 + i) + rng.normal(0, 0.1, STEPS)
        if name in anomalous:
            signal[300:340] *= 3.0
        frames.append(pd.DataFrame({"machine": name, "recorded_at": pd.date_range(START, periods=STEPS, freq="s"),
                                    "signal": signal}))
    frame = pd.concat(frames, ignore_index=True)
    assert frame["recorded_at"].dtype == "datetime64[ns]"
    return frame.assign(date=frame["recorded_at"].dt.strftime("%Y-%m-%d"))


def truth(names: list[str], path: Path) -> str:
    """The anomaly intervals of `names` (the stretches `readings` made), as tfos evaluate reads them."""
    pd.DataFrame({"machine": names, "start": START + pd.Timedelta(seconds=300),
                  "end": START + pd.Timedelta(seconds=339), "kind": "amplitude"}).to_parquet(path, coerce_timestamps="us")
    return str(path)


def sensors_config(root: Path, *overrides: str):
    return config.load(SENSORS, [f"prepare.output={root / 'dataset'}", f"train.dataset={root / 'dataset'}",
                                 f"train.model_dir={root / 'model'}", *overrides])


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    """The same readings in every layout: one Parquet file (written with the microsecond times the
    nanosecond hint asks for), a date-partitioned directory, a catalog table; and the pandas file."""
    root = tmp_path_factory.mktemp("sensors")
    names = machine_names(spark, MACHINES)
    eval_machine = lowest_hash(spark, config.load(SENSORS), names)  # where the split rule puts it
    in_train = [names[0], names[-1]] if eval_machine not in (names[0], names[-1]) else [names[1], names[-2]]
    frame = readings(names, {*in_train, eval_machine})
    columns = ["machine", "recorded_at", "signal"]
    frame[columns].to_parquet(root / "nanos.parquet")
    frame[columns].to_parquet(root / "readings.parquet", coerce_timestamps="us", allow_truncated_timestamps=True)
    for date, part in frame.groupby("date"):
        (root / "by_date" / f"date={date}").mkdir(parents=True)
        part[columns].to_parquet(root / "by_date" / f"date={date}" / "part-0.parquet", coerce_timestamps="us")
    spark.read.parquet(str(root / "by_date")).write.partitionBy("date").saveAsTable(TABLE)
    yield {"root": root, "names": names, "frame": frame, "eval_machine": eval_machine, "in_train": in_train}
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")


LAYOUTS = {
    "one file": lambda root: ["sources.readings.format=parquet", f"sources.readings.path={root / 'readings.parquet'}"],
    "date partitions": lambda root: ["sources.readings.format=parquet", f"sources.readings.path={root / 'by_date'}"],
    "catalog table": lambda root: ["sources.readings.format=table", f"sources.readings.table={TABLE}"],
}


def tfos(*args: str, sets: list[str]) -> subprocess.CompletedProcess:
    """A `tfos` command as a user runs it: TensorFlow's log level left to TensorFlow."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([str(BIN / "tfos"), *args, "--config", str(SENSORS), *[a for s in sets for a in ("--set", s)]],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def assert_no_cuda_noise(proc: subprocess.CompletedProcess) -> None:
    output = proc.stdout + proc.stderr
    assert "cuInit" not in output and "cuda" not in output.lower() and "oneDNN custom operations" not in output


@pytest.fixture(scope="module")
def pipeline(spark, data, tmp_path_factory):
    """`tfos prepare` and `tfos train` on the single file as a user runs them (training in that
    command's own process, where TensorFlow starts), then predict in this session."""
    root = tmp_path_factory.mktemp("sensors-run")
    sets = [f"prepare.output={root / 'dataset'}", f"train.dataset={root / 'dataset'}", f"train.model_dir={root / 'model'}",
            f"predict.model={root / 'model'}", f"predict.output={root / 'scores'}", "train.strategy=local",
            "train.epochs=6", "spark.conf.spark.ui.showConsoleProgress=false", *LAYOUTS["one file"](data["root"])]
    cfg = config.load(SENSORS, sets)
    prepared = tfos("prepare", sets=sets)
    trained = tfos("train", sets=sets)
    scored = predict.run(spark, cfg, log=lambda _: None)
    manifest = json.loads((root / "dataset" / "_meta" / "manifest.json").read_text())
    return {"cfg": cfg, "root": root, "manifest": manifest, "prepared": prepared, "trained": trained, "scored": scored}


def test_every_layout_gives_the_same_windows(spark, data):
    windows = {name: window_table(spark, config.load(SENSORS, layout(data["root"])), config.load(SENSORS).features)
               .select("machine", "window_start", "window_end", "signal") for name, layout in LAYOUTS.items()}
    expected = windows.pop("one file").cache()
    assert expected.count() == MACHINES * ((STEPS - 50) // 25 + 1)
    assert sorted(r["machine"] for r in expected.select("machine").distinct().collect()) == sorted(data["names"])
    for layout in windows.values():
        assertDataFrameEqual(layout, expected)


def test_a_table_spark_wrote_with_its_default_timestamps_reads(spark, data, tmp_path):
    """Spark writes timestamps (with the session's zone) as Parquet INT96 by default, which pyarrow
    reads as nanoseconds."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    spark.read.parquet(str(data["root"] / "readings.parquet")) \
        .select("machine", F.col("recorded_at").cast("timestamp").alias("recorded_at"), "signal") \
        .write.parquet(str(tmp_path / "spark"))
    written = next((tmp_path / "spark").glob("*.parquet"))
    assert pq.ParquetFile(written).schema.column(1).physical_type == "INT96"
    cfg = config.load(SENSORS, [f"sources.readings.path={tmp_path / 'spark'}"])
    assert window_table(spark, cfg, cfg.features).count() == MACHINES * ((STEPS - 50) // 25 + 1)


def test_a_partition_column_holding_the_key_takes_the_specs_type(spark, data, tmp_path):
    """machine=7/ reads as an integer in Spark's eyes; the spec says the key is a string. Parquet
    and CSV files under such directories give the same windows."""
    frame = data["frame"].assign(machine=lambda f: f["machine"].str[-2:].astype(int).astype(str))
    for machine, part in frame.groupby("machine"):
        for fmt in ("parquet", "csv"):
            (tmp_path / fmt / f"machine={machine}").mkdir(parents=True)
        part[["recorded_at", "signal"]].to_parquet(tmp_path / "parquet" / f"machine={machine}" / "0.parquet",
                                                   coerce_timestamps="us")
        part[["recorded_at", "signal"]].to_csv(tmp_path / "csv" / f"machine={machine}" / "0.csv", index=False)
    windows = {}
    for fmt in ("parquet", "csv"):
        cfg = config.load(SENSORS, [f"sources.readings.format={fmt}", f"sources.readings.path={tmp_path / fmt}"])
        windows[fmt] = window_table(spark, cfg, cfg.features).select("machine", "window_start", "signal")
    assert dict(windows["parquet"].dtypes)["machine"] == dict(windows["csv"].dtypes)["machine"] == "string"
    assert windows["parquet"].select("machine").distinct().count() == MACHINES
    assertDataFrameEqual(windows["csv"], windows["parquet"])


@pytest.mark.slow  # on a trained pipeline of its own: `make test-all`
def test_few_machines_still_give_eval_one_and_say_so(pipeline, data):
    manifest = pipeline["manifest"]
    assert manifest["splits"]["eval"]["assets"] == 1 and manifest["splits"]["train"]["assets"] == MACHINES - 1
    assert manifest["splits"]["eval"]["records"] == 23 and manifest["splits"]["train"]["records"] == 23 * 5
    entry = manifest["split"]
    assert entry["eval_below"] > split_mod.nominal_boundary(split_mod.from_manifest(entry)[0])
    assert entry["adjusted"] == (f"eval_fraction = 0.2 put all {MACHINES} values of 'machine' in train; "
                                 "the one with the lowest hash went to eval")
    assert f"split: {entry['adjusted']}" in pipeline["prepared"].stdout
    # the machine that went to eval is the one with the lowest hash, as the rule says
    root = pipeline["root"]
    import tensorflow as tf

    context = {"machine": tf.io.FixedLenFeature([], tf.string)}
    in_eval = {tf.io.parse_single_sequence_example(r, context_features=context)[0]["machine"].numpy().decode()
               for f in sorted((root / "dataset" / "eval").glob("*.tfrecord")) for r in tf.data.TFRecordDataset(str(f))}
    assert in_eval == {data["eval_machine"]}


def lowest_hash(spark, cfg, names: list[str]) -> str:
    frame = spark.createDataFrame([(n,) for n in names], "machine string")
    return frame.orderBy(split_mod.bucket(cfg.prepare.split, "machine")).first()["machine"]


def test_one_machine_cannot_be_split_and_prepare_says_why(spark, data, tmp_path):
    one = data["frame"][data["frame"]["machine"] == data["names"][0]]
    one[["machine", "recorded_at", "signal"]].to_parquet(tmp_path / "one.parquet", coerce_timestamps="us")
    cfg = sensors_config(tmp_path, f"sources.readings.path={tmp_path / 'one.parquet'}")
    with pytest.raises(InputError, match=r"prepare.split.eval_fraction = 0.2: the usable data holds 1 value\(s\) of "
                                         r"the key 'machine', all in train; a split by key needs at least 2"):
        prepare.run(spark, cfg, log=lambda _: None)
    assert not (tmp_path / "dataset").exists()


def test_nanosecond_times_get_a_hint_naming_the_file_and_column(spark, data, tmp_path):
    cfg = sensors_config(tmp_path, f"sources.readings.path={data['root'] / 'nanos.parquet'}")
    with pytest.raises(InputError, match=r"file \S*nanos.parquet: column 'recorded_at' holds nanosecond timestamps, "
                                         r"which Spark cannot read; write it with microsecond timestamps: pandas "
                                         r"df.to_parquet\(path, coerce_timestamps=\"us\""):
        prepare.run(spark, cfg, log=lambda _: None)


def test_spark_reading_nanoseconds_itself_gives_the_hint(spark, data):
    """Files the driver cannot open itself (HDFS, S3) are read by Spark, whose error gets the hint."""
    from tfos_jobs.config import SourceConfig
    from tfos_jobs.data import sources

    with pytest.raises(InputError, match=r"Illegal Parquet type: INT64 \(TIMESTAMP\(NANOS,false\)\).*; write it with "
                                         r"microsecond timestamps"):
        sources.read(spark, "readings", SourceConfig(format="parquet", path=str(data["root"] / "nanos.parquet")))


@pytest.mark.slow  # on a trained pipeline of its own: `make test-all`
def test_train_refuses_an_empty_split_before_any_node_starts(spark, pipeline, tmp_path):
    """A dataset prepared before empty splits were refused: training stops on the driver."""
    dataset = tmp_path / "dataset"
    shutil.copytree(pipeline["root"] / "dataset", dataset)
    manifest = json.loads((dataset / "_meta" / "manifest.json").read_text())
    manifest["splits"]["eval"] = {"records": 0, "assets": 0, "files": []}
    (dataset / "_meta" / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(dataset / "eval")
    (dataset / "eval").mkdir()
    cfg = sensors_config(tmp_path, "train.strategy=multi_worker_mirrored")
    with pytest.raises(InputError, match=r"train.dataset: \S+: the eval split holds no records \(train 115, eval 0\); "
                                         r"training needs both"):
        train.run(spark, cfg, log=lambda _: None)
    assert not (tmp_path / "model").exists()


def reading_errors(spark, scores: Path, machine: str) -> tuple[np.ndarray, np.ndarray]:
    """The machine's 600 readings: whether each lies in the interval (300-339 s), and the highest reconstruction
    error of the windows of 50 s, one every 25 s, covering it."""
    windows = spark.read.parquet(str(scores)).where(f"machine = '{machine}'").toPandas()
    first = (windows[WINDOW_START] - windows[WINDOW_START].min()).dt.total_seconds().astype(int).to_numpy()  # 0-550
    error = windows[contract.RECONSTRUCTION_ERROR].to_numpy()
    highest = [max(e for f, e in zip(first, error) if f <= second < f + 50) for second in range(STEPS)]
    return (np.arange(STEPS) >= 300) & (np.arange(STEPS) <= 339), np.array(highest)


@pytest.mark.slow  # on a trained pipeline of its own: `make test-all`
def test_evaluate_judges_the_windows_outside_the_train_split_beside_every_baseline(spark, pipeline, data):
    cfg, root = pipeline["cfg"], pipeline["root"]
    lines: list[str] = []
    path = truth([*data["in_train"], data["eval_machine"]], root / "truth-all.parquet")
    report = anomaly_report.evaluate(spark, cfg, cfg.features, str(root / "scores"), path, log=lines.append)
    # the eval machine's windows; those overlapping [300, 339] s start at 275, 300 and 325 s
    assert report["windows"] == {"judged": 23, "anomalous": 3, "assets": 1, "baselines_fitted_per_asset": 0,
                                 "baselines_fitted_on_the_fleet": 23}  # the eval machine has no train window
    # its readings, 0-599 s, each covered by one window or two; 300-339 s lie in the interval
    assert report["readings"] == {"judged": 600, "anomalous": 40, "assets_with_both": 1}
    assert set(report["scores"]) == {contract.RECONSTRUCTION_ERROR, *baselines.NAMES}
    for figures in report["scores"].values():
        assert 0.0 <= figures["roc_auc"] <= 1.0 and 0.0 < figures["auprc"] <= 1.0
        assert 0.0 < figures["vus_roc"] <= 1.0 and 0.0 < figures["vus_pr"] <= 1.0
    # a triple amplitude is what the window's standard deviation sees: it ranks those windows first
    std = report["scores"][baselines.WINDOW_STD]
    assert (std["roc_auc"], std["auprc"]) == (1.0, 1.0)
    assert report["per_asset"][data["eval_machine"]][baselines.WINDOW_STD] == std  # one asset: the fleet's mean is its
    # on readings: each of the 600 s takes the highest error of the (one or two) windows covering it
    model = report["scores"][contract.RECONSTRUCTION_ERROR]
    expected = vus.volumes(*reading_errors(spark, root / "scores", data["eval_machine"]))
    assert expected is not None and model["vus_pr"] == round(expected.pr, 6) and model["vus_roc"] == round(expected.roc, 6)
    assert report["per_asset"][data["eval_machine"]][contract.RECONSTRUCTION_ERROR] == model
    # the windows around the incident's 40 s share its score: within VUS's buffer, they cost little
    assert std["vus_pr"] > report["scores"][baselines.RANDOM]["vus_pr"] + 0.3
    alerts = report["alerts"]
    assert alerts["incidents"] == 1 and alerts["incidents_detected"] in (0, 1)
    assert alerts["threshold"] == json.loads((root / "model" / "metrics.json").read_text())["anomaly"]["threshold"]
    nothing_flagged = alerts["flagged"] == 0
    assert set(report["not_computed"]) == ({"is_anomaly precision"} if nothing_flagged else set())
    assert lines[0].startswith("windows judged: 23 of 1 assets, 3 overlap a true anomaly")
    assert lines[1].split() == ["score", "ROC", "AUC", "AUPRC", "VUS-ROC", "VUS-PR"]
    assert any(line.startswith("  window standard deviation") and line.split()[-4:] == [
        "1.0000", "1.0000", f"{std['vus_roc']:.4f}", f"{std['vus_pr']:.4f}"] for line in lines)
    assert any(line.startswith("readings judged: 600 (") for line in lines)
    assert any(line.startswith("point-adjusted F1") for line in lines)
    metrics = json.loads((root / "model" / "metrics.json").read_text())
    assert metrics["evaluation"] == report
    assert (root / "model" / "anomalies.png").stat().st_size > 0
    assert (root / "model" / "evaluation.png").stat().st_size > 10_000


@pytest.mark.slow  # on a trained pipeline of its own: `make test-all`
def test_evaluate_without_an_anomaly_among_the_judged_windows_says_what_it_cannot_compute(spark, pipeline, data):
    cfg, root = pipeline["cfg"], pipeline["root"]
    lines: list[str] = []
    path = truth(data["in_train"], root / "truth-train.parquet")
    report = anomaly_report.evaluate(spark, cfg, cfg.features, str(root / "scores"), path, log=lines.append)
    assert report["windows"]["judged"] == 23 and report["windows"]["anomalous"] == 0
    assert report["scores"][contract.RECONSTRUCTION_ERROR] == {"roc_auc": None, "auprc": None, "vus_pr": None,
                                                               "vus_roc": None}
    reason = "none of the 23 judged windows overlaps a true anomaly"
    assert report["not_computed"][f"{contract.RECONSTRUCTION_ERROR} ROC AUC and AUPRC"] == reason
    assert report["not_computed"][f"{baselines.PCA_MAX} ROC AUC and AUPRC"] == reason
    assert report["not_computed"][f"{baselines.PCA_MAX} VUS-PR and VUS-ROC"] == \
        "none of the 600 judged readings lies in a true anomaly"
    assert report["alerts"]["event_recall"] is None and report["alerts"]["recall"] is None
    assert report["not_computed"]["event recall"] == "no incident of the truth table overlaps a judged window"
    assert f"not computed: {contract.RECONSTRUCTION_ERROR} ROC AUC and AUPRC: {reason}" in lines


@pytest.mark.slow  # on a trained pipeline of its own: `make test-all`
def test_tfos_prepare_and_train_print_no_cuda_noise(pipeline):
    """The commands a user runs, on a machine without a GPU: no line about CUDA or cuInit."""
    assert "windows: train 115 from 5 assets in 2 files, eval 23 from 1 asset in 1 file" in pipeline["prepared"].stdout
    assert "epoch   6/6" in pipeline["trained"].stdout
    assert_no_cuda_noise(pipeline["prepared"])
    assert_no_cuda_noise(pipeline["trained"])
