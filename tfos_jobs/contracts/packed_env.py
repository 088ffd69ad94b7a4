"""A packed environment (`tfos pack-env`, shipped with --archives): the venv's tree, whose
site-packages holds the package, which executors find under the archive's link name."""
from __future__ import annotations

import sys
from pathlib import Path


def site_packages(root: Path) -> Path:
    """Where the packages are under a venv's (or an unpacked archive's) root: this Python's version."""
    return root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
