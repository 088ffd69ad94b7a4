"""`tfos sweep` reads its base config once and checks each distinct model its trials build once:
trials are the base config with typed settings, never a file read again (a real session, the
trials' nodes played by threads)."""
from __future__ import annotations

import json
import subprocess
import sys

from tfos_jobs import config
from tfos_jobs.config import sweep as sweep_file
from tfos_jobs.search import space

from tests.conftest import CENSUS, ROOT
from tests.unit.test_sweep_launcher import tiny_dataset

SWEEP = ROOT / "conf" / "sweep.toml"


def test_the_base_config_is_read_once_and_each_trial_model_checked_once(tmp_path):
    dataset = tiny_dataset(tmp_path / "dataset")
    sets = ["spark.master=local[1]", f"train.dataset={dataset}", "train.reservation_timeout=5",
            "train.max_attempts=1", f"sweep.dir={tmp_path / 'sweep'}", "sweep.max_trials=3"]
    proc = subprocess.run([sys.executable, "-m", "tests.spark.counted_sweep", "sweep", "--config", str(CENSUS),
                           "--space", str(SWEEP), *[a for s in sets for a in ("--set", s)]],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["code"] == 0 and counts["trials"] == 3, proc.stdout[-3000:]
    assert counts["reads"] == {str(CENSUS): 1, str(SWEEP): 1}
    models = space.trial_models(config.load(CENSUS), sweep_file.load(SWEEP))
    assert len(models) == 4 and sorted(counts["checks"]) == sorted(map(repr, models))
    assert set(counts["checks"].values()) == {1}
    assert "trial 003 completed" in proc.stdout and "best: trial" in proc.stdout, proc.stdout[-3000:]
