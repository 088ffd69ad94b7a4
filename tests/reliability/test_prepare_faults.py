"""Prepare under faults: retried write tasks, a job that fails for good, re-runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tfos_jobs import config
from tfos_jobs.data import synthetic
from tfos_jobs.data import dataset
from tfos_jobs.jobs import prepare
from tfos_jobs.errors import InputError

from tests.conftest import CENSUS, ROOT, census_overrides

PEOPLE = 2000

# Runs prepare in its own Spark (local[2,3]: up to 3 attempts per task) with a filter after
# the write's shuffle that raises in write tasks: on first attempts only, or always.
SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from tfos_jobs import config, session_builder
    from tfos_jobs.data import tfrecord
    from tfos_jobs.jobs import prepare

    raw, out, mode, marks = sys.argv[1:5]
    real_layout = tfrecord.layout

    def faulty_layout(df, files, key, then=()):
        @F.udf("boolean")
        def flaky(k):
            ctx = TaskContext.get()
            if ctx.partitionId() == 1 and k % 5 == 0 and (mode == "always" or ctx.attemptNumber() == 0):
                Path(marks, f"attempt-{ctx.attemptNumber()}").touch()
                raise RuntimeError("injected write failure")
            return True
        # nondeterministic: the optimizer must not push the filter below the write's shuffle
        return real_layout(df, files, key, then).where(flaky.asNondeterministic()(F.col(key)))

    tfrecord.layout = faulty_layout
    overrides = [f"sources.people.path={raw}/people", f"sources.regions.path={raw}/regions",
                 f"sources.events.path={raw}/events", f"prepare.output={out}", "prepare.files_per_split=3",
                 "spark.master=local[2,3]", "spark.conf.spark.ui.showConsoleProgress=false"]
    cfg = config.load(sys.argv[5], overrides)
    manifest = prepare.run(session_builder.build(cfg.spark), cfg).to_dict()
    print("RECORDS", manifest["splits"]["train"]["records"] + manifest["splits"]["eval"]["records"])
""")


@pytest.fixture(scope="module")
def raw(spark, tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    synthetic.generate(spark, str(raw), PEOPLE, 3.0, 5, "2026-01-01")
    return raw


def run_faulty(raw: Path, out: Path, mode: str, marks: Path) -> subprocess.CompletedProcess:
    marks.mkdir()
    script = marks / "faulty_prepare.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), str(raw), str(out), mode, str(marks), str(CENSUS)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)})


def tf_records(files: list[str]) -> int:
    import tensorflow as tf

    return sum(1 for _ in tf.data.TFRecordDataset(files))


@pytest.mark.slow  # a prepare with a failing task: `make test-all`
def test_a_write_task_that_fails_once_still_gives_a_whole_dataset(raw, tmp_path):
    out = tmp_path / "dataset"
    proc = run_faulty(raw, out, "first-attempt", tmp_path / "marks")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert (tmp_path / "marks" / "attempt-0").exists()  # the fault did happen
    m = dataset.read(str(out))
    total = sum(m.records(s) for s in ("train", "eval"))
    assert f"RECORDS {total}" in proc.stdout
    assert total == PEOPLE - m.manifest.rejected["rows"]
    for split in ("train", "eval"):
        files = m.files(split)
        assert len(files) == 3
        assert tf_records(files) == m.records(split)  # every shard whole and readable
        leftovers = [p for p in os.listdir(out / split) if not p.startswith((".part-", "part-"))]
        assert leftovers == []
    assert (out / "_SUCCESS").exists()


@pytest.mark.slow  # a prepare failing for good after its retries: `make test-all`
def test_a_job_that_fails_for_good_leaves_no_dataset(spark, raw, tmp_path):
    out = tmp_path / "dataset"
    proc = run_faulty(raw, out, "always", tmp_path / "marks")
    assert proc.returncode != 0
    assert "injected write failure" in proc.stdout + proc.stderr
    assert (tmp_path / "marks" / "attempt-2").exists()  # retried to the limit
    assert not out.exists()
    assert not list(tmp_path.glob("dataset.staging-*"))
    from tfos_jobs.jobs.train.driver import job as train

    cfg = config.load(CENSUS, [f"train.dataset={out}", "train.strategy=local"])
    with pytest.raises(InputError, match="is not a prepared dataset: _meta/manifest.json is missing"):
        train.run(spark, cfg)


def test_preparing_the_same_input_twice_gives_the_same_meta_and_records(spark, raw, tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        prepare.run(spark, config.load(CENSUS, census_overrides(raw, out, PEOPLE)))
        outs.append(out)
    a, b = outs
    for rel in ["_meta/feature_spec.json", "_meta/stats.json",
                *[f"_meta/vocab/{p.name}" for p in (a / "_meta" / "vocab").iterdir()]]:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    ma, mb = (json.loads((d / "_meta" / "manifest.json").read_text()) for d in (a, b))
    for m in (ma, mb):
        for varying in ("created_at", "seconds", "output"):
            m.pop(varying)
    assert ma == mb
    for split in ("train", "eval"):
        names = sorted(p.name for p in (a / split).glob("part-*"))
        assert names == sorted(p.name for p in (b / split).glob("part-*"))
        assert all((a / split / n).read_bytes() == (b / split / n).read_bytes() for n in names)


# Publishes `staging` as `out` (dataset.publish, on local paths) and is killed (SIGKILL) right
# after the publish's rename number `step`: 1 = the old dataset moved aside, 2 = the new one in place.
KILLED_PUBLISH = textwrap.dedent("""
    import os, signal, sys
    from tfos_jobs.data import dataset
    from tfos_jobs.storage import Storage

    staging, out, step = sys.argv[1], sys.argv[2], int(sys.argv[3])

    class KilledAfterRename:
        def __init__(self, fs):
            self.fs, self.renames = fs, 0

        def __getattr__(self, name):
            return getattr(self.fs, name)

        def rename(self, src, dst):
            self.fs.rename(src, dst)
            self.renames += 1
            if self.renames == step:
                os.kill(os.getpid(), signal.SIGKILL)

    storage = Storage(None)
    dataset.publish(KilledAfterRename(storage), storage.qualify(staging), storage.qualify(out))
""")


@pytest.mark.parametrize("step, kept", [(1, "old"), (2, "new")])
def test_a_publish_killed_between_its_steps_leaves_a_whole_dataset_to_read(spark, raw, tmp_path, step, kept):
    import shutil

    from tfos_jobs.storage import Storage, restore_aside

    out, staging = tmp_path / "dataset", tmp_path / "dataset.staging-new"
    prepare.run(spark, config.load(CENSUS, census_overrides(raw, out, PEOPLE)))
    shutil.copytree(out, staging)
    manifest = staging / "_meta" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"created_at": "', '"created_at": "new '))
    (manifest.parent / f".{manifest.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old text
    created = {"old": json.loads((out / "_meta" / "manifest.json").read_text())["created_at"],
               "new": json.loads(manifest.read_text())["created_at"]}

    script = tmp_path / "killed_publish.py"
    script.write_text(KILLED_PUBLISH)
    proc = subprocess.run([sys.executable, str(script), str(staging), str(out), str(step)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -9, proc.stderr[-2000:]  # killed where planned
    assert out.exists() == (step == 2) and len(list(tmp_path.glob("dataset.old-*"))) == 1

    storage = Storage(spark)
    meta = dataset.read(str(out), storage)  # a reader finds the dataset, in place or aside, and moves nothing
    assert meta.manifest.created_at == created[kept]
    for split in ("train", "eval"):
        assert tf_records(meta.files(split)) == meta.records(split)  # every shard whole and readable
    assert len(list(tmp_path.glob("dataset.old-*"))) == 1
    assert restore_aside(storage, storage.qualify(str(out))) == (step == 1)  # what the next publish does first
    assert list(tmp_path.glob("dataset.old-*")) == []
    assert dataset.read(str(out), storage).manifest.created_at == created[kept]
