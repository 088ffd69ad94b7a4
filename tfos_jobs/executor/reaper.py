"""`python -m tfos_jobs.executor.reaper WATCHED_PID PID...`: end PIDs once WATCHED_PID is gone.

Started detached by a TF node; exits on its own when its targets are gone."""
from __future__ import annotations

import sys
import time

from tfos_jobs.executor.lifecycle import alive, kill


def main(argv: list[str]) -> int:
    watched, targets = int(argv[0]), [int(p) for p in argv[1:]]
    while True:
        targets = [p for p in targets if alive(p)]
        if not targets:
            return 0
        if not alive(watched):
            kill(targets)
            return 0
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
