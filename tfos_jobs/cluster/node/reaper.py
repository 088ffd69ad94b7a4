"""`python -m tfos_jobs.cluster.node.reaper WATCHED_PID WORKSPACE_ROOT NODE PID...`: end PIDs and
clear the node's workspace once WATCHED_PID is gone.

Started detached by a TF node; exits on its own once its targets are gone and the node has
cleared its workspace itself."""
from __future__ import annotations

import os
import sys
import time

from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node.lifecycle import alive, kill


def main(argv: list[str]) -> int:
    watched, workspace, targets = int(argv[0]), Workspace(argv[1], argv[2]), [int(p) for p in argv[3:]]
    while True:
        targets = [p for p in targets if alive(p)]
        if not targets and not os.path.exists(workspace.own):
            return 0
        if not alive(watched):
            kill(targets)
            workspace.leave()
            return 0
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
