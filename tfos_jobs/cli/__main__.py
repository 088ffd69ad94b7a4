"""`python -m tfos_jobs.cli ...`: the same as `tfos ...`."""
import sys

from tfos_jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
