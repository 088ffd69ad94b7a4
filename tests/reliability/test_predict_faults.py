"""`tfos predict` killed while it writes, then run again: the output is absent or whole, never
partial, and the second run writes every key once."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import config
from tfos_jobs.jobs.train.driver import job as train_job
from tfos_jobs.storage import HadoopFS, left_staging

from tests.commands import kill_group, kill_started, start, tfos_command
from tests.conftest import CENSUS, census_overrides, prepared_dataset

pytestmark = pytest.mark.slow  # trains a model, then two `tfos predict` on a local-cluster: run by `make test-all`

PEOPLE = 4000


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("predict-faults")
    dataset = prepared_dataset(spark, root, PEOPLE, 3.0, 5)
    model = root / "model"
    cfg = config.load(CENSUS, census_overrides(root / "raw", dataset, PEOPLE) + [
        f"train.dataset={dataset}", f"train.model_dir={model}", "train.strategy=local", "train.epochs=1",
        "train.tensorboard=false"])
    train_job.run(spark, cfg, log=lambda _: None)
    return root / "raw", model


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    kill_started()


def predict_command(raw: Path, model: Path, output: Path) -> list[str]:
    return tfos_command("predict", *census_overrides(raw, raw.parent / "unused", PEOPLE, master="local-cluster[2,1,1024]"),
                        f"predict.model={model}", f"predict.output={output}", "predict.batch_size=200",
                        "spark.conf.spark.ui.showConsoleProgress=false")


def writing(output: Path) -> list[Path]:
    """Spark's task output in progress for `output`, wherever this version of predict writes it."""
    return [p for p in output.parent.glob(f"{output.name}*/_temporary") if any(p.rglob("*.parquet"))]


def test_a_predict_killed_mid_write_leaves_no_partial_output_and_runs_again(spark, trained, tmp_path):
    raw, model = trained
    output = tmp_path / "predictions"
    cmd = predict_command(raw, model, output)
    first = start(cmd)
    deadline = time.monotonic() + 600
    while not writing(output) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writing(output), "the write never started:\n" + (first.stderr.read()[-3000:] if first.poll() is not None else "")
    kill_group(first)
    assert not output.exists(), sorted(str(p.relative_to(tmp_path)) for p in output.rglob("*"))[:20]

    second = start(cmd)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, out[-2000:] + err[-3000:]
    assert f"predicted {PEOPLE:,} rows into file:{output} (create)" in out
    scored = spark.read.parquet(str(output))
    assert scored.count() == PEOPLE
    keys = spark.read.parquet(str(raw / "people")).select("person_id")
    assertDataFrameEqual(scored.select("person_id"), keys)  # each key once, none missing
    assert left_staging(HadoopFS(spark), f"file:{output}") == []  # the killed run's files were removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions"]
