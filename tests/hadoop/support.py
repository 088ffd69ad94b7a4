"""What the real-component services share: the test jars, free ports, and child processes that
cannot outlive the test process.

Every service (MiniDFS, S3Proxy) is a JVM started in its own session and process group, with
PR_SET_PDEATHSIG = KILL (the kernel kills it when the process that started it dies, however it
died) and its stdin a pipe from us. `stop()` kills the whole process group.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = ROOT / "scripts" / "fetch-test-jars"
JARS_DIR = Path(os.environ.get("TFOS_TEST_JARS", ROOT / ".cache" / "test-jars"))
BIN = Path(sys.executable).parent  # the venv's bin/ (pytest runs on the venv's Python)

_PR_SET_PDEATHSIG = 1
_jars_checked = False


def ensure_test_jars() -> Path:
    """The test jars directory, fetched and compiled by scripts/fetch-test-jars when needed (the
    script returns at once when everything is there; `make test-jars` runs the same thing)."""
    global _jars_checked
    if not _jars_checked:
        proc = subprocess.run([str(FETCH_SCRIPT), str(JARS_DIR)], capture_output=True, text=True,
                              env={**os.environ, "TFOS_VENV": str(BIN.parent)}, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/fetch-test-jars {JARS_DIR} failed (exit {proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
        _jars_checked = True
    return JARS_DIR


def jars(group: str) -> list[Path]:
    """The jars of one group: minicluster, s3a or s3proxy (see scripts/fetch-test-jars)."""
    found = sorted((ensure_test_jars() / group).glob("*.jar"))
    if not found:
        raise RuntimeError(f"no jars in {JARS_DIR / group}; run make test-jars")
    return found


def pyspark_jars_dir() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent / "jars"


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child must not load libraries


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def spawn(cmd: Sequence[str], log: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.Popen:
    """A child in its own session (so its process group is its pid), killed by the kernel if this
    process dies, with stdout and stderr to `log` and stdin a pipe we hold."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen([str(c) for c in cmd], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True, preexec_fn=_die_with_parent)


def run(cmd: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True) for a child that the kernel kills if this
    process dies (a killed test must not leave a spark-submit driver or a half-done start behind);
    on timeout the child is killed and TimeoutExpired raised."""
    proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, preexec_fn=_die_with_parent)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """TERM to the child's process group, KILL after `grace` seconds; returns when the child is reaped."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc.pid, signal.SIGKILL)  # the leader may be gone while others of its group live on
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    if proc.stdin:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"({path}: {e})"
    return "\n".join(text[-lines:])


def wait_until(ready: Callable[[], object], proc: subprocess.Popen, timeout: float, what: str,
               log: Path, interval: float = 0.1):
    """Polls `ready()` until it returns something truthy; fails with the log's tail if the process
    exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {proc.returncode}; {log}:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout:.0f} s; {log}:\n{tail(log)}")
        time.sleep(interval)


class Reaper:
    """A watchdog for what PDEATHSIG cannot cover (daemons that leave our session on purpose, such
    as the standalone cluster's): a small process in its own session that runs `command` when the
    pipe from this process closes without `disarm()` (this process died, even by KILL)."""

    def __init__(self, command: Sequence[str], log: Path, env: dict[str, str] | None = None):
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.hadoop.reaper", "--", *map(str, command)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                start_new_session=True)

    def disarm(self) -> None:
        """The command is not needed any more (the caller cleaned up itself)."""
        if self.proc.poll() is None and self.proc.stdin:
            try:
                self.proc.stdin.write(b"disarm\n")
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
