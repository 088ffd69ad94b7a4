"""A MariaDB server from Debian's `mariadb-server` package: its own data directory, one database
and one user with a password, on 127.0.0.1. Spark reads it with MySQL Connector/J."""
from __future__ import annotations

import shutil
import subprocess

from tfos_jobs.databases import process

JDBC_PACKAGE = "com.mysql:mysql-connector-j:9.5.0"
SERVER = "mariadbd"


def binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if not found:
        raise RuntimeError(f"{name} is not installed (Debian's mariadb-server package; make test installs it when run as root)")
    return found


def available() -> bool:
    try:
        binary(SERVER)
        return True
    except RuntimeError:
        return False


class MariaDB(process.LocalServer):
    SCHEME, PREFIX = "mysql", "tfos-maria-"
    proc: subprocess.Popen | None = None

    def _start(self) -> None:
        assert self.root is not None  # set by start()
        data, self.socket, self.log = self.root / "data", self.root / "sock", self.root / "server.log"
        account = process.run_as() or ""
        user = ["--user=" + account] if account else []
        process.run([binary("mariadb-install-db"), "--no-defaults", f"--datadir={data}", *user,
                     "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=180)
        process.chown_tree(self.root)
        self.proc = subprocess.Popen(
            [binary(SERVER), "--no-defaults", f"--datadir={data}", f"--socket={self.socket}", f"--port={self.port}",
             f"--bind-address={process.HOST}", f"--log-error={self.log}", f"--pid-file={self.root / 'pid'}",
             "--skip-log-bin", "--innodb-buffer-pool-size=64M", *user],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        process.wait_for_port(self.port, 60, self.log, self.proc)
        self.admin(f"CREATE DATABASE `{self.database}`;\n"
                   f"CREATE USER '{self.user}'@'%' IDENTIFIED BY '{self.password}';\n"
                   f"GRANT ALL ON `{self.database}`.* TO '{self.user}'@'%';\n")

    def admin(self, statements: str) -> str:
        """SQL as the server's root, over its socket (statements on stdin, never in argv)."""
        return process.run([binary("mariadb"), "--no-defaults", f"--socket={self.socket}", "-u", "root",
                            "--batch", "--skip-column-names"], stdin=statements)

    def sql(self, statements: str) -> str:
        return self.admin(f"USE `{self.database}`;\n{statements}")

    def _shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: a clean shutdown
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
