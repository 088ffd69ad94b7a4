"""`python -m tests.hadoop.reaper -- COMMAND...`: waits for its stdin to close; runs COMMAND then,
unless the first line read was `disarm`. Started by support.Reaper in its own session, so that it
outlives the test process it watches (and a Ctrl-C to the terminal's foreground group)."""
from __future__ import annotations

import subprocess
import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m tests.hadoop.reaper -- COMMAND...", file=sys.stderr)
        return 2
    line = sys.stdin.readline()  # blocks until the watched process writes or its end of the pipe closes
    if line.strip() == "disarm":
        return 0
    print(f"reaper: the watched process went away; running {' '.join(argv)}", flush=True)
    return subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=300).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
