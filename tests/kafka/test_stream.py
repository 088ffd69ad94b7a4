"""`tfos stream` on a real broker, run as users run it (the command, on a local-cluster), against
batch scoring of the same sensor readings:

* with a backlog several micro-batches long and a CPU burner beside it, killed mid-run (SIGKILL
  to its process group) and started again on its checkpoint, it scores every window exactly
  once, with the batch model's scores, and quarantines every malformed, keyless, timeless, late
  and duplicate event, and every window batch preparation drops, by reason;
* a query that fails (its executors killed, the master giving the application up) ends the
  command with exit code 2 and one error line naming the micro-batch, never an idle stop;
* a new model version written into the model directory mid-stream is used from one micro-batch
  on, every row tagged with the version that scored it, and scored as that version scores it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from tests.commands import CpuBurners, in_group, kill_group
from tests.conftest import ROOT
from tfos_jobs import config
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.data import fleet, windows
from tfos_jobs.data.columns import DROP_REASON
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START
from tfos_jobs.jobs import prepare
from tfos_jobs.serving.scoring import with_predictions
from tfos_jobs.jobs.stream.driver import replay
from tfos_jobs.jobs.stream.driver.replay import source_rows
from tfos_jobs.jobs.train.driver import tracked as train

pytestmark = pytest.mark.slow

FLEET = ROOT / "conf" / "fleet.toml"
BIN = Path(sys.executable).parent
ASSETS, STEPS, STEP = 6, 1400, 60
WATERMARK = 300  # seconds
KEY, TIME = "asset_id", "ts"
WAIT = 300  # seconds: the bound of every wait on a stream's output
MAX_OFFSETS = 1500  # events per micro-batch


def fleet_overrides(root: Path, model: str = "model-a") -> list[str]:
    sensors = root / "raw" / fleet.SENSORS_DIR
    return [f"sources.sensors.path={sensors}", f"sources.sensors_csv.path={sensors}",
            f"prepare.output={root / 'dataset'}", "prepare.files_per_split=2", "prepare.split.eval_fraction=0.4",
            f"train.dataset={root / 'dataset'}", f"train.model_dir={root / model}", f"predict.model={root / model}",
            "train.strategy=local", "train.epochs=1", "train.batch_size=32", "train.model.latent_dim=4",
            "train.tensorboard=false"]


@pytest.fixture(scope="module")
def fleet_models(spark, tmp_path_factory):
    """Readings of a small fleet, and two models of its windows (8 and 12 units)."""
    root = tmp_path_factory.mktemp("stream-fleet")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    fleet.generate(str(root / "raw"), ASSETS, STEPS, seed=5, csv_every=3)
    cfg = config.load(FLEET, fleet_overrides(root))
    prepare.run(spark, cfg, log=lambda _: None)
    for name, units in (("model-a", 8), ("model-b", 12)):
        train.run(spark, config.load(FLEET, [*fleet_overrides(root, name), f"train.model.units={units}"]), overwrite=True)
    readings = source_rows(spark, cfg, None, None).toPandas().sort_values([TIME, KEY]).reset_index(drop=True)
    return cfg, root, readings


def batch_scores(spark, cfg, readings: pd.DataFrame, model: Path, name: str) -> pd.DataFrame:
    """Every window of `readings`, cut and scored in batch: key, bounds, drop reason, error."""
    from udfs import register

    rows = spark.createDataFrame(readings)
    cut = windows.as_timestamps(windows.all_windows(rows, cfg.features)).cache()
    udf = register(spark, name, str(model))
    scored = with_predictions(windows.usable(cut), udf).select(KEY, WINDOW_START, WINDOW_END,
                                                               serving.RECONSTRUCTION_ERROR)
    dropped = cut.where(F.col(DROP_REASON).isNotNull()).select(KEY, WINDOW_START, WINDOW_END, DROP_REASON)
    out = scored.toPandas(), dropped.toPandas()
    cut.unpersist()
    return out


def stream_command(root: Path, kafka, topic: str, run: str, model: Path, *extra: str) -> list[str]:
    sets = [*fleet_overrides(root), f"stream.bootstrap_servers=\"{kafka.bootstrap}\"", f"stream.topic={topic}",
            f"stream.model={model}", f"stream.output={root / run / 'scores'}",
            f"stream.quarantine={root / run / 'quarantine'}", f"stream.checkpoint={root / run / 'checkpoint'}",
            f"stream.progress_log={root / run / 'micro_batches.jsonl'}", f"stream.watermark_seconds={WATERMARK}",
            "stream.trigger_seconds=1", f"stream.max_offsets_per_trigger={MAX_OFFSETS}", "stream.alerts=2",
            "spark.master=local-cluster[2,1,1536]", "spark.conf.spark.sql.shuffle.partitions=4", *extra]
    return [str(BIN / "tfos"), "stream", "--config", str(FLEET), *[a for s in sets for a in ("--set", s)]]


def started(cmd: list[str], log: Path) -> subprocess.Popen:
    """The command in a process group of its own, its output in `log` (a pipe nobody reads
    would fill and block a long stream)."""
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)},
                                start_new_session=True)


def committed(root: Path) -> list[int]:
    """The micro-batches whose directory is in place."""
    prefix = f"{contract.MICRO_BATCH}="
    return sorted(int(p.name[len(prefix):]) for p in root.glob(f"{prefix}*")) if root.exists() else []


def wait_for(what: str, condition: Callable[[], bool], proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the stream exited ({proc.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {WAIT} s:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def finished(proc: subprocess.Popen, log: Path) -> str:
    try:
        proc.wait(WAIT)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"the stream did not stop within {WAIT} s:\n{log.read_text()[-4000:]}")
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    return text


def send_readings(spark, kafka, topic: str, readings: pd.DataFrame) -> int:
    rows = spark.createDataFrame(readings)
    return replay.send(replay.as_events(rows, KEY, TIME), bootstrap_servers=kafka.bootstrap, topic=topic, rate=0,
                       disorder=40, seed=3, log=lambda _: None)


def event(row: pd.Series, **changes) -> str:
    values = {KEY: row[KEY], TIME: row[TIME].strftime("%Y-%m-%dT%H:%M:%S"),
              **{c: (None if pd.isna(row[c]) else float(row[c])) for c in row.index if c not in (KEY, TIME)}}
    values.update(changes)
    return json.dumps({k: v for k, v in values.items() if v is not ...})


def emitted(windows_frame: pd.DataFrame, readings: pd.DataFrame) -> pd.DataFrame:
    """The windows a stream of `readings` has emitted once it stops: those whose last step the
    watermark (the latest reading's time less WATERMARK) has passed."""
    watermark = readings[TIME].max() - pd.Timedelta(seconds=WATERMARK)
    return windows_frame[windows_frame[WINDOW_END] < watermark]


def test_a_killed_stream_restarts_from_its_checkpoint_and_scores_every_window_once(spark, kafka, fleet_models):
    cfg, root, readings = fleet_models
    topic, model = "readings-restart", root / "model-a"
    kafka.create_topic(topic, partitions=2)
    sent = send_readings(spark, kafka, topic, readings)
    first = readings.iloc[0]
    bad = ["{oops", "plain text", event(first, temperature="hot"),  # malformed: 3
           event(first, asset_id=None), event(first, asset_id=...),  # missing key: 2
           event(first, ts=None), event(first, ts=...)]  # missing time: 2
    kafka.produce(topic, [(None, value, None) for value in bad])

    assert sent > 5 * MAX_OFFSETS  # a backlog of several micro-batches
    log = root / "restart.log"
    command = stream_command(root, kafka, topic, "restart", model)
    scores = root / "restart" / "scores"
    with CpuBurners(1):
        proc = started(command, log)
        try:
            wait_for("two micro-batches of scores", lambda: len(committed(scores)) >= 2, proc, log)
        finally:
            kill_group(proc)
        before_restart = committed(scores)
        # A reading for a window already scored, and a second reading of a step an asset has.
        last = readings[readings[KEY] == first[KEY]].iloc[-1]
        kafka.produce(topic, [(first[KEY], event(first), None), (last[KEY], event(last), None)])

        proc = started(stream_command(root, kafka, topic, "restart", model, "stream.stop_when_idle_seconds=15"), log)
        out = finished(proc, log)
    assert "stream stopped (no event for 15 s)" in out
    failures = [line for line in out.splitlines() if " ERROR " in line or "error:" in line or "Traceback" in line]
    assert not failures, failures

    got = spark.read.parquet(str(scores)).toPandas()
    assert set(before_restart) < set(committed(scores))
    assert not got.duplicated([KEY, WINDOW_START]).any(), "a window scored twice"
    want, dropped = batch_scores(spark, cfg, readings, model, "batch_a")
    want = emitted(want, readings)
    merged = want.merge(got, on=[KEY, WINDOW_START, WINDOW_END], how="outer", suffixes=("_batch", ""), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][[KEY, WINDOW_START, "_merge"]]
    np.testing.assert_allclose(merged[serving.RECONSTRUCTION_ERROR], merged[f"{serving.RECONSTRUCTION_ERROR}_batch"],
                               rtol=1e-5, atol=1e-6)
    assert got[contract.MODEL_VERSION].nunique() == 1
    assert (got[contract.SCORED_AT] >= got[contract.EVENT_TIMESTAMP]).all()

    quarantined = spark.read.parquet(str(root / "restart" / "quarantine")).toPandas()
    dropped = emitted(dropped, readings)
    counts = quarantined[contract.REASON].value_counts().to_dict()
    reason = contract.Reason
    assert counts == {reason.MALFORMED.value: 3, reason.MISSING_KEY.value: 2, reason.MISSING_TIME.value: 2,
                      reason.LATE.value: 1, reason.DUPLICATE.value: 1, **dropped[DROP_REASON].value_counts().to_dict()}
    assert not quarantined.duplicated([contract.RAW, KEY, WINDOW_START, contract.READING_TIME]).any()
    late = quarantined[quarantined[contract.REASON] == reason.LATE.value].iloc[0]
    assert late[KEY] == first[KEY] and late[contract.READING_TIME] == first[TIME] and "already scored" in late[contract.DETAIL]
    assert set(quarantined.loc[quarantined[contract.REASON] == reason.MALFORMED.value, contract.RAW]) == set(bad[:3])
    lines = [json.loads(x) for x in (root / "restart" / "micro_batches.jsonl").read_text().splitlines()]
    # a line per micro-batch that read or wrote rows (those the kill cut short have none)
    assert 0 < sum(line[contract.SCORED] for line in lines) <= len(got)
    assert sum(line[contract.INPUT_ROWS] for line in lines) <= sent + len(bad) + 2 + MAX_OFFSETS  # one replayed
    assert all(line[contract.STATE_ROWS] == ASSETS for line in lines[1:])  # one state row per asset
    assert {contract.PROCESSED_ROWS_PER_SECOND, contract.BATCH_MS, contract.WATERMARK} <= set(lines[-1])


def test_a_failed_query_ends_the_command_with_one_error_line(spark, kafka, fleet_models):
    """Its executors killed, and the cluster's master giving the application up (no executor
    retried: spark.deploy.maxExecutorRetries = 0), the query fails: the command says so, once."""
    cfg, root, readings = fleet_models
    topic = "readings-killed"
    kafka.create_topic(topic, partitions=2)
    send_readings(spark, kafka, topic, readings)
    log = root / "killed.log"
    proc = started(stream_command(root, kafka, topic, "killed", root / "model-a",
                                  "spark.conf.spark.deploy.maxExecutorRetries=0", "stream.stop_when_idle_seconds=30"), log)
    try:
        wait_for("a micro-batch of scores", lambda: len(committed(root / "killed" / "scores")) >= 1, proc, log)
        executors = in_group(proc.pid, "CoarseGrainedExecutorBackend")
        assert len(executors) == 2
        for pid in executors:
            os.kill(pid, 9)
        proc.wait(WAIT)
    finally:
        kill_group(proc)
    text = log.read_text()
    assert proc.returncode == 2, text[-4000:]
    errors = [line for line in text.splitlines() if line.startswith("tfos stream: error:")]
    assert len(errors) == 1, text[-4000:]
    assert re.match(r"tfos stream: error: stream: the query failed in micro-batch \d+: .+", errors[0]), errors
    assert "stream stopped" not in text


def test_a_new_model_version_is_picked_up_between_micro_batches(spark, kafka, fleet_models):
    from udfs.model_location import served_version

    cfg, root, readings = fleet_models
    topic, serving_dir = "readings-swap", root / "serving"
    shutil.copytree(root / "model-a", serving_dir)
    version_a = served_version(spark, str(serving_dir), setting="stream.model")
    kafka.create_topic(topic, partitions=2)
    half = readings[TIME].quantile(0.5)
    send_readings(spark, kafka, topic, readings[readings[TIME] <= half])

    log = root / "swap.log"
    proc = started(stream_command(root, kafka, topic, "swap", serving_dir, "stream.stop_when_idle_seconds=20"), log)
    scores = root / "swap" / "scores"
    try:
        wait_for("scores of the first version", lambda: len(committed(scores)) >= 1, proc, log)
        staged = root / "serving.new"
        shutil.copytree(root / "model-b", staged)
        os.rename(serving_dir, root / "serving.old")
        os.rename(staged, serving_dir)
        version_b = served_version(spark, str(serving_dir), setting="stream.model")
        send_readings(spark, kafka, topic, readings[readings[TIME] > half])
        out = finished(proc, log)
    finally:
        kill_group(proc)
    assert version_a != version_b
    assert f"model: {version_a} -> {version_b}" in out

    got = spark.read.parquet(str(scores)).toPandas()
    assert set(got[contract.MODEL_VERSION]) == {version_a, version_b}
    per_batch = got.groupby(contract.MICRO_BATCH)[contract.MODEL_VERSION].agg(set)
    assert (per_batch.map(len) == 1).all()  # one version per micro-batch
    first_b = min(b for b, v in per_batch.items() if v == {version_b})
    assert all(v == ({version_a} if b < first_b else {version_b}) for b, v in per_batch.items())
    for version, model, name in ((version_a, root / "model-a", "batch_a"), (version_b, root / "model-b", "batch_b")):
        mine = got[got[contract.MODEL_VERSION] == version]
        want, _ = batch_scores(spark, cfg, readings, model, name)
        both = mine.merge(want, on=[KEY, WINDOW_START], suffixes=("", "_batch"))
        assert len(both) == len(mine) > 0
        np.testing.assert_allclose(both[serving.RECONSTRUCTION_ERROR], both[f"{serving.RECONSTRUCTION_ERROR}_batch"],
                                   rtol=1e-5, atol=1e-6)
