"""What the figures were measured on: a benchmark is meaningless without its machine and stack."""
from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

PACKAGES = ("pyspark", "tensorflow", "tf-keras", "tensorflowonspark", "pyarrow", "pandas", "numpy", "mlflow-skinny")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def _java() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        return (out.stderr or out.stdout).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def describe() -> dict[str, str]:
    """Machine and versions, as label -> text."""
    info = {
        "CPU": f"{os.cpu_count()} cores, {_cpu_model()}",
        "memory": f"{_memory_gib():.1f} GiB",
        "OS": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": _java(),
    }
    for name in PACKAGES:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = "not installed"
    return info
