"""`[serve_sql]`: `tfos serve-sql`, the JDBC/ODBC endpoint (HiveServer2's protocol) where the
prediction functions are registered for any SQL client."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Literal, Mapping

LOOPBACK_NAMES = ("localhost",)


def is_loopback(address: str) -> bool:
    """An address only this host can reach: 127.0.0.0/8, ::1 or `localhost`."""
    if address in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServeSqlConfig:
    """`functions` maps SQL function names to models (directories on any filesystem, or
    `models:/NAME@alias`); empty: `predict.name` serving `predict.model`. Every login is checked:
    `auth = "password"` (one password, read at start from the environment variable
    `password_env` or the file `password_file`, never from the config; `user`, if set, is the
    one user name admitted) or `ldap` (HiveServer2's LDAP check against `ldap_url`); `none`
    (anyone who can reach the port) is allowed on a loopback `bind` only.
    `tls_keystore` (a JKS or PKCS12 file; its password in the variable
    `tls_keystore_password_env`) turns on TLS. Queries run as the server's own user."""

    port: int = 10000
    bind: str = "127.0.0.1"
    transport: Literal["binary", "http"] = "binary"
    http_path: str = "cliservice"
    functions: Mapping[str, str] = field(default_factory=dict)
    auth: Literal["password", "ldap", "none"] = "password"
    user: str = ""
    password_env: str = "TFOS_SQL_PASSWORD"
    password_file: str = ""
    ldap_url: str = ""
    ldap_base_dn: str = ""
    tls_keystore: str = ""
    tls_keystore_password_env: str = ""
    status_seconds: float = 5.0  # how often the status view's counters are brought up to date

    def errors(self) -> list[str]:
        errs = []
        if not 0 <= self.port <= 65535:
            errs.append(f"serve_sql.port: must be 0-65535 (0: a free port), got {self.port}")
        if not self.bind.strip():
            errs.append("serve_sql.bind: must not be empty (127.0.0.1 serves this host only)")
        elif not is_loopback(self.bind) and self.auth == "none":
            errs.append(f"serve_sql.bind: {self.bind!r} is reachable from other hosts; it needs serve_sql.auth = "
                        "'password' (the password from serve_sql.password_env or serve_sql.password_file) or 'ldap'")
        for name in self.functions:
            if not name.isidentifier():
                errs.append(f"serve_sql.functions: {name!r} is not a valid SQL function name")
        for name, model in self.functions.items():
            if not model.strip():
                errs.append(f"serve_sql.functions.{name}: the model is empty")
        if self.auth == "password" and not (self.password_env or self.password_file):
            errs.append("serve_sql.password_env / password_file: auth = 'password' needs one of them")
        if self.auth == "ldap" and not self.ldap_url:
            errs.append("serve_sql.ldap_url: auth = 'ldap' needs the LDAP server's URL (ldap://... or ldaps://...)")
        if self.tls_keystore and not self.tls_keystore_password_env:
            errs.append("serve_sql.tls_keystore_password_env: TLS needs the variable holding the keystore's password")
        if not self.http_path.strip("/"):
            errs.append("serve_sql.http_path: must not be empty")
        if self.status_seconds <= 0:
            errs.append(f"serve_sql.status_seconds: must be > 0, got {self.status_seconds}")
        return errs

