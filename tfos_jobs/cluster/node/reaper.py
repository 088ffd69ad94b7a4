"""`python -m tfos_jobs.cluster.node.reaper WATCHED_PID WORKSPACE_ROOT NODE PID...`: end PIDs and
clear the node's workspace once WATCHED_PID is gone (WORKSPACE_ROOT "": no workspace to clear).

Started detached by a TF node's task or process; exits on its own once its targets are gone and
the node has cleared its workspace itself."""
from __future__ import annotations

import os
import sys
import time

from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node.lifecycle import alive, kill


def main(argv: list[str]) -> int:
    watched, targets = int(argv[0]), [int(p) for p in argv[3:]]
    workspace = Workspace(argv[1], argv[2]) if argv[1] else None
    while True:
        targets = [p for p in targets if alive(p)]
        if not targets and (workspace is None or not os.path.exists(workspace.own)):
            return 0
        if not alive(watched):
            kill(targets)
            if workspace is not None:
                workspace.leave()
            return 0
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
