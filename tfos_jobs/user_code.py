"""The user's own model code, shipped to where it runs.

A model given as "module:function" (`train.model.kind`) is imported on the driver, and on every executor that builds it
(TF nodes, sweep trials), which share neither the driver's disk nor its `PYTHONPATH`. A module the driver imports from
its own files (`PYTHONPATH`, the current directory) is handed to Spark: a top-level module as its `.py` file, a package
as a `.zip` of its top-level directory. Installed modules (site-packages, the standard library) and this package travel
with the environment instead. `tfos train` and `tfos sweep` add the file with `SparkContext.addPyFile`, or from a Spark
Connect client as a session artifact (`spark.addArtifacts(..., pyfile=True)`, `sessions.add_python_file`); `tfos submit`
with `--py-files`, so that in cluster mode the remote driver imports it too.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import site
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable

PACKAGE_MODULES = ("tfos_jobs", "udfs")  # this package's own: installed with it everywhere


def module_of(kind: str) -> str | None:
    """The module of a "module:function" model kind; None for the built-in kinds."""
    module, sep, attr = kind.partition(":")
    return module if sep and module and attr else None


def find_in_current_dir(kind: str) -> None:
    """Python puts the current directory on `sys.path` for `python -m` and the REPL, not for a console script such as
    `tfos`: a model module found nowhere else is looked for there too (last, so installed modules keep precedence)."""
    module = module_of(kind)
    if module is None or os.getcwd() in sys.path or "" in sys.path:
        return
    try:
        found = importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        sys.path.append(os.getcwd())
        importlib.invalidate_caches()


def import_function(ref: str, setting: str) -> Callable[..., Any]:
    """The callable a "module:function" `ref` names, imported here (the current directory too: `find_in_current_dir`).
    ValueError names `setting`, the module and, for a misspelled function, the closest one the module has."""
    import difflib
    import importlib

    module_name, _, attr = ref.partition(":")
    find_in_current_dir(ref)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{setting}: cannot import module {module_name!r} of {ref!r}: {e}") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        public = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        close = difflib.get_close_matches(attr, public, n=1)
        hint = f" (did you mean {module_name}:{close[0]}?)" if close else ""
        raise ValueError(f"{setting}: {ref!r}: module {module_name!r} has no callable {attr!r}{hint}")
    return fn


def to_ship(kind: str) -> str | None:
    """The file Spark must hand the executors so that they import `kind`'s module: its `.py`
    file, or a `.zip` of its top-level package; None when there is nothing to ship (a built-in
    kind, an installed module, or a module this process cannot find)."""
    module = module_of(kind)
    if module is None:
        return None
    top = module.split(".")[0]
    if top in PACKAGE_MODULES:
        return None
    find_in_current_dir(kind)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    where = locations[0] if locations else spec.origin
    if not where or spec.origin in ("built-in", "frozen") or _installed(where):
        return None
    if not locations:
        return where if where.endswith(".py") else None  # an extension module cannot be shipped as a file
    return package_zip(Path(where), top)


def _installed(path: str) -> bool:
    """Under site-packages or the standard library: the environment brings it."""
    roots = {*site.getsitepackages(), site.getusersitepackages(),
             *(sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib"))}
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(r) + os.sep) for r in roots if r)


def package_zip(directory: Path, top: str) -> str:
    """`directory` (the package `top`) zipped as `top/...`, named by its content, so the same code gives the same file
    and Spark, which refuses a second file of one name, never sees a changed file under an old name."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix not in (".pyc", ".pyo"))
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(directory)).encode() + b"\0" + p.read_bytes() + b"\0")
    out_dir = Path(tempfile.gettempdir()) / f"tfos-user-code-{os.getuid()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{top}-{digest.hexdigest()[:12]}.zip"
    if not out.exists():
        partial = out.with_suffix(f".tmp-{os.getpid()}")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in files:
                zf.write(p, f"{top}/{p.relative_to(directory)}")
        os.replace(partial, out)
    return str(out)


def files_for(kinds: Iterable[str]) -> list[str]:
    """What to ship for these model kinds, each file once."""
    return list(dict.fromkeys(path for kind in kinds if (path := to_ship(kind)) is not None))


def ship(spark: Any, kinds: Iterable[str], log: Callable[[str], None] = print) -> list[str]:
    """Hand the files of `kinds`' modules to the executors' Python workers, for every later
    task; a file of a name Spark already has (given with `--py-files`) is not added again."""
    from tfos_jobs import sessions

    files = files_for(kinds)
    have = sessions.shipped_files(spark) if files else set()
    shipped = []
    for path in files:
        if os.path.basename(path) in have:
            continue
        sessions.add_python_file(spark, path)
        shipped.append(path)
        log(f"model code: {path} shipped to the executors")
    return shipped
