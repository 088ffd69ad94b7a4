"""What both local servers need: a throwaway directory, a free loopback port, a wait until the
server answers, and (as root) an unprivileged account to run it."""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
UNPRIVILEGED = "nobody"  # PostgreSQL refuses to run as root


def scratch_dir(prefix: str) -> Path:
    """Short (socket paths are limited to ~100 bytes) and owned by whoever runs the server."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    chown_tree(path)
    return path


def run_as() -> str | None:
    return UNPRIVILEGED if os.geteuid() == 0 else None


def chown_tree(path: Path) -> None:
    account = run_as()
    if not account:
        return
    entry = pwd.getpwnam(account)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, log: Path, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{tail(log)}")
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the server did not listen on {HOST}:{port} within {timeout:.0f} s:\n{tail(log)}")


def run(cmd: list[str], *, user: str | None = None, env: dict[str, str] | None = None, stdin: str | None = None,
        timeout: float = 120) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, input=stdin, timeout=timeout, user=user,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} exited with {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalServer:
    """One database and one user with a password, on a free (or given) loopback port; the
    server and its directory are gone when the `with` block ends, also when starting failed."""

    SCHEME = ""  # jdbc:<scheme>://
    PREFIX = "tfos-db-"  # of the scratch directory

    def __init__(self, database: str = "tfos", user: str = "tfos", password: str | None = None, port: int = 0):
        self.database, self.user = database, user
        self.password = password or secrets.token_urlsafe(16)
        self.port = port or free_port()
        self.root: Path | None = None

    @property
    def url(self) -> str:
        return f"jdbc:{self.SCHEME}://{HOST}:{self.port}/{self.database}"

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.root = scratch_dir(self.PREFIX)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            self._shutdown()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def _start(self) -> None:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError
