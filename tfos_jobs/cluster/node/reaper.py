"""`python -m tfos_jobs.cluster.node.reaper WATCHED_PID WORKSPACE_ROOT NODE`: clear the node's
workspace once WATCHED_PID is gone.

Started detached by a TF node's task; exits on its own once the node has cleared its workspace
itself."""
from __future__ import annotations

import os
import sys
import time

from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node.lifecycle import alive


def main(argv: list[str]) -> int:
    watched, workspace = int(argv[0]), Workspace(argv[1], argv[2])
    while True:
        if not os.path.exists(workspace.own):
            return 0
        if not alive(watched):
            workspace.leave()
            return 0
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
