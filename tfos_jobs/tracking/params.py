"""A config as MLflow params: flat dotted keys, values as text, secrets masked."""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from tfos_jobs import config as config_mod
from tfos_jobs.config import Config

MAX_VALUE = 6000  # MLflow's limit on a param's value
_SECRET_KEY = re.compile(r"password|passwd|pwd|secret|token|credential", re.IGNORECASE)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@\s]+):[^@/\s]*@")
_QUERY_SECRET = re.compile(r"(?P<key>(?:password|passwd|pwd|secret|token)=)[^&;\s]*", re.IGNORECASE)
MASK = "***"


def redact(text: str) -> str:
    """A URL or option value with any password in it masked (`user:***@host`, `password=***`)."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}{MASK}", text)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`{"train": {"model": {"kind": "x"}}}` -> `{"train.model.kind": "x"}`; lists and empty
    tables as JSON; every value redacted, and masked whole under a key that names a secret."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
            continue
        if _SECRET_KEY.search(str(key)) and not str(key).endswith(("_env", "_file")):
            text = MASK
        elif isinstance(value, str):
            text = value
        else:
            text = json.dumps(value, default=str)
        out[name] = redact(text)[:MAX_VALUE]
    return out


def config_params(config: Config) -> dict[str, str]:
    """The resolved config as params: every section but the features (logged as the spec) and
    the embedded demo data's (what `tfos generate` writes, not how the model is trained)."""
    tree = config_mod.to_dict(config)
    for section in ("features", "synthetic", "fleet"):
        tree.pop(section, None)
    return flatten(tree)
