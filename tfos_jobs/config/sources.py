"""`[sources.<name>]`: the input tables, and the rule that keeps passwords out of the config."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Union, get_args

FileFormat = Literal["parquet", "csv", "json", "orc", "adult_csv"]
SourceFormat = Literal[FileFormat, "table", "jdbc"]
FILE_FORMATS: tuple[str, ...] = get_args(FileFormat)
SOURCE_FORMATS: tuple[str, ...] = get_args(SourceFormat)
_SECRET_OPTIONS = ("password", "passwd", "pwd", "secret", "token")


@dataclass(frozen=True)
class SourceConfig:
    """One input table: a path in a file format, a catalog table, or a JDBC table or query.

    `filter` is a SQL condition applied where the data is read: it prunes a partitioned table's
    partitions and is pushed down to a database. A JDBC password is never written here:
    `password_env` names an environment variable that holds it, `password_file` a file."""

    format: SourceFormat
    path: Union[str, None] = None
    table: Union[str, None] = None
    schema: Union[str, None] = None
    filter: Union[str, None] = None
    options: Mapping[str, str] = field(default_factory=dict)
    password_env: Union[str, None] = None
    password_file: Union[str, None] = None
    connect_timeout: int = 10  # seconds to reach a database server before the source is declared unreachable

    def location(self) -> str:
        where = self.path or self.table or self.options.get("dbtable", "") or self.options.get("query", "")
        if self.format == "jdbc" and "url" in self.options:
            return f"{where} at {self.options['url']}"
        return where

    def errors(self, where: str) -> list[str]:
        errs = []
        if self.format in FILE_FORMATS and not self.path:
            errs.append(f"{where}.path: required for format = {self.format!r}")
        if self.format == "table" and not self.table:
            errs.append(f"{where}.table: required for format = 'table'")
        if self.format == "jdbc" and not ("url" in self.options and ("dbtable" in self.options or "query" in self.options)):
            errs.append(f"{where}.options: format = 'jdbc' needs url and dbtable (or query)")
        return errs + self._credential_errors(where)

    def _credential_errors(self, where: str) -> list[str]:
        """A password written in the config would be printed by `tfos config` and kept in
        manifests and logs; refuse it without repeating it."""
        errs = []
        for key in self.options:
            if key.lower() in _SECRET_OPTIONS:
                errs.append(f"{where}.options.{key}: a password is never written in the config; name an environment "
                            "variable (password_env) or a file (password_file) that holds it")
        url = self.options.get("url", "")
        if self.format == "jdbc" and url:
            query = url.split("?", 1)[1] if "?" in url else ""
            params = {p.split("=", 1)[0].lower() for p in query.replace("&", ";").split(";") if "=" in p}
            if params & set(_SECRET_OPTIONS) or "@" in url.split("//", 1)[-1].split("/", 1)[0]:
                errs.append(f"{where}.options.url: holds a password; name an environment variable (password_env) "
                            "or a file (password_file) that holds it instead")
            if not url.startswith("jdbc:"):
                errs.append(f"{where}.options.url: a JDBC URL starts with 'jdbc:', e.g. jdbc:postgresql://host:5432/db")
        if self.format != "jdbc" and (self.password_env or self.password_file):
            errs.append(f"{where}: password_env and password_file apply to format = 'jdbc' only")
        if self.password_env and self.password_file:
            errs.append(f"{where}: give password_env or password_file, not both")
        if self.connect_timeout < 1:
            errs.append(f"{where}.connect_timeout: must be >= 1, got {self.connect_timeout}")
        return errs


def unknown(sources: Mapping[str, SourceConfig], where: str, name: str) -> list[str]:
    """An error when `name` (the value of the setting `where`) is not a configured source."""
    return [] if name in sources else [f"{where}: {name!r} is not a source; sources: {', '.join(sources)}"]
