"""spark-submit entry point: `spark-submit tfos_jobs/entrypoints/sweep.py --config conf/census.toml --space conf/sweep.toml`."""
import os
import sys

# spark-submit puts this file's folder first on sys.path; drop it so that module names in the
# package (config, session, ...) cannot shadow top-level modules of other libraries.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

from tfos_jobs.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))
