"""Pack the virtualenv this package runs in as a `.tar.gz` that YARN (or any cluster manager
that unpacks `--archives`) ships to every container, so executors run the same Python
packages as the driver without anything installed on the cluster's hosts:

    tfos pack-env tfos-env.tar.gz
    tfos submit --master yarn --env-archive tfos-env.tar.gz train --config census ...

What the archive holds and leaves out:
- the venv as it is (`bin/`, `lib/`, `pyvenv.cfg`; symlinks within it kept as symlinks, those
  that lead out of it, such as `bin/python`, replaced by the file: Spark's own unpacking, for
  `--archives` on standalone and Kubernetes, refuses links out of the archive), with this
  package installed as a wheel would be: an editable install (`pip install -e`) points at a
  source tree the containers do not have, so its hooks are replaced by the package's files;
- not Spark's own jars (`pyspark/jars`, about 400 MB): YARN containers get them from the Spark
  that submits the job (`spark.yarn.archive` or `spark.yarn.jars`), and Python needs none; nor
  the C headers of TensorFlow, Arrow and NumPy, which only building extensions needs;
- not the Python installation: the copied `bin/python` finds its standard library through
  `home` in `pyvenv.cfg`, which must exist at the same path on every host (as with
  `venv --copies` and venv-pack; conda-pack packs the interpreter too).

`.tar.gz` (or `.tar`) rather than `.zip`: YARN unpacks tarballs with `tar`, which keeps the
symlinks and executable bits a venv needs; zip archives lose them.
"""
from __future__ import annotations

import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Callable, Iterator, Literal

from tfos_jobs.contracts.packed_env import site_packages
from tfos_jobs.errors import ConfigError

PACKAGES = ("tfos_jobs", "udfs")  # this distribution's top-level packages
# Relative to site-packages: Spark's jars, and the C headers packages ship for building extensions against them
# (TensorFlow's alone are 18,000 files: every file costs a container's localizer time).
SKIPPED = ("pyspark/jars", "tensorflow/include", "pyarrow/include", "numpy/_core/include")
EDITABLE_PREFIX = "__editable__"


def venv_root() -> Path:
    """The virtualenv this interpreter runs in; a ConfigError outside one."""
    if sys.prefix == sys.base_prefix or not (Path(sys.prefix) / "pyvenv.cfg").is_file():
        raise ConfigError(f"pack-env packs a virtualenv, and {sys.executable} does not run in one: "
                          "create a venv, install this package into it and run its `tfos pack-env`")
    return Path(sys.prefix)


def _package_dirs() -> dict[str, Path]:
    import importlib

    dirs: dict[str, Path] = {}
    for name in PACKAGES:
        init = importlib.import_module(name).__file__
        assert init is not None  # regular packages: __file__ is their __init__.py
        dirs[name] = Path(init).parent
    return dirs


def members(root: Path) -> Iterator[tuple[Path, str, bool]]:
    """(file on disk, name in the archive, follow symlinks) for everything the archive holds.

    The venv's own files keep their symlinks; this package's files, when they live outside the
    venv (an editable install), are added under site-packages with links followed (a checkout
    links its sample configs from the repository's `conf/`)."""
    site = site_packages(root)
    skipped = {site / s for s in SKIPPED}
    outside = {name: d for name, d in _package_dirs().items() if site not in d.parents}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if here / d not in skipped)
        for name in sorted(filenames) + [d for d in dirnames if (here / d).is_symlink()]:
            path = here / name
            if outside and here in (site, site / "__pycache__") and name.startswith(EDITABLE_PREFIX):
                continue  # the editable install's path hook: replaced by the files below
            yield path, str(path.relative_to(root)), path.is_symlink() and root not in path.resolve().parents
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
    for name, directory in outside.items():
        for dirpath, dirnames, filenames in os.walk(directory, followlinks=True):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                arcname = site / name / path.relative_to(directory)
                yield path, str(arcname.relative_to(root)), True


def _mode(name: str) -> Literal["w:gz", "w"]:
    if name.endswith((".tar.gz", ".tgz")):
        return "w:gz"
    if name.endswith(".tar"):
        return "w"
    raise ConfigError(f"pack-env: {name!r}: the archive's name must end in .tar.gz (or .tgz), or .tar for an "
                      "uncompressed one; YARN unpacks it by that suffix")


def pack(output: str | Path, *, compresslevel: int = 1, log: Callable[[str], None] = print) -> dict[str, float]:
    """Write the archive to `output` (a local file, written whole or not at all); returns its
    size and how long packing took. `.tar.gz` at level 1: three times faster than gzip's
    default for a few percent more bytes (most of the venv is shared libraries that compress
    little); `.tar`: 2.5 times the bytes and no compressing, quicker where the network is."""
    root = venv_root()
    output = Path(output).resolve()
    mode = _mode(output.name)
    if root.resolve() in output.parents:  # `output` is resolved: a venv reached through a symlink too
        raise ConfigError(f"pack-env: the archive {str(output)!r} would be written into the venv it packs ({root})")
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial")
    started = time.monotonic()
    files = 0
    log(f"packing {root} into {output}")
    try:
        with (tarfile.open(partial, mode, compresslevel=compresslevel) if mode == "w:gz" else tarfile.open(partial, mode)) as tar:
            for path, arcname, follow in members(root):
                info = tar.gettarinfo(str(path.resolve() if follow else path), arcname)
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
                files += 1
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    seconds = time.monotonic() - started
    size = output.stat().st_size
    log(f"packed {files:,} files into {output} ({size / 2**20:,.0f} MB) in {seconds:.0f} s")
    return {"files": files, "bytes": size, "seconds": seconds}
