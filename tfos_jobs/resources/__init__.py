"""Files the package ships: the sample configs, the sweep file and queries (`conf/`), the GPU discovery script Spark
runs on executors, and the console's log4j2 profile.

In a checkout these are the repository's own files (linked from here); a wheel holds copies. Either way a user can name
a sample instead of a path: `tfos prepare --config census`."""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def root() -> Path:
    return Path(str(resources.files(__name__)))


def sample_configs() -> list[str]:
    """Names of the shipped sample configs, e.g. ["adult", "census", "sweep"]."""
    return sorted(p.stem for p in (root() / "conf").glob("*.toml"))


def config_path(name_or_path: str) -> str:
    """A config file: the path as given when it exists, else the shipped sample of that name
    ("census" or "census.toml"); anything else is returned as given, for the loader to report."""
    if os.path.exists(name_or_path) or os.sep in name_or_path:
        return name_or_path
    sample = root() / "conf" / (name_or_path if name_or_path.endswith(".toml") else f"{name_or_path}.toml")
    return str(sample) if sample.is_file() else name_or_path


DEMO_QUERIES = {"rows": "positive_rate_by_education.sql", "windows": "top_window_errors.sql"}


def demo_query(kind: str = "rows") -> str:
    """The demo's SQL: over the census `features` view ("rows") or the fleet's `windows`."""
    return str(root() / "conf" / "queries" / DEMO_QUERIES[kind])


def gpu_discovery_script() -> str:
    return str(root() / "gpu_discovery.sh")


def log4j2_profile() -> str:
    """The log4j2 configuration every command's JVMs log with (`--verbose`: Spark's own)."""
    return str(root() / "log4j2.properties")
