"""Shared fixtures. Spark tests use one real local[2] session with the TFRecord jar."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
CENSUS = ROOT / "conf" / "census.toml"

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def load_file(path: Path, name: str) -> ModuleType:
    """A Python file of the repository that is not in a package (a script, the build backend),
    loaded as module `name`; its name need not end in .py."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


# What each folder's tests need beyond Python, as markers (`pytest -m "not hadoop"`); the
# unit tests (tests/unit, `make test-fast`) need none of these.
NEEDS = {"spark": "spark", "jvm": "spark", "bench": "spark", "reliability": "cluster", "cluster": "cluster",
         "connect": "cluster", "e2e": "cluster", "serving": "servers", "warehouse": "servers", "tracking": "servers",
         "hadoop": "hadoop", "kafka": "kafka"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        folder = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if folder in NEEDS:
            item.add_marker(NEEDS[folder])


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from tfos_jobs import session_builder
    from tfos_jobs.config import SparkConfig

    spark = session_builder.build(SparkConfig(master="local[2]", app_name="tfos-tests", conf={
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": "4",
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),  # tables tests save
    }))
    yield spark
    spark.stop()


def census_overrides(raw: Path, out: Path, people: int = 3000, master: str = "local[2]") -> list[str]:
    """Overrides that point conf/census.toml at a small data set under a temporary directory."""
    return [
        f"spark.master={master}",
        f"synthetic.people={people}",
        f"synthetic.output={raw}",
        f"sources.people.path={raw}/people",
        f"sources.regions.path={raw}/regions",
        f"sources.events.path={raw}/events",
        f"prepare.output={out}",
        "prepare.files_per_split=4",
    ]


def prepared_dataset(spark, root: Path, people: int, events_per_person: float, seed: int) -> Path:
    """The embedded data at a small size, generated and prepared under `root`; the dataset's path."""
    from tfos_jobs import config
    from tfos_jobs.data import synthetic
    from tfos_jobs.jobs import prepare

    synthetic.generate(spark, str(root / "raw"), people, events_per_person, seed, "2026-01-01")
    prepare.run(spark, config.load(CENSUS, census_overrides(root / "raw", root / "dataset", people)))
    return root / "dataset"
