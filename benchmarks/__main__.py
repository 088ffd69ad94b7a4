"""`python -m benchmarks --config conf/census.toml ...`: the same run as `tfos bench ...`."""
from __future__ import annotations

import sys

from benchmarks.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m benchmarks"))
