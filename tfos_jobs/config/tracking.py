"""`[tracking]`: where runs, sweeps and models are logged (MLflow); off unless `uri` is set."""
from __future__ import annotations

import re
from dataclasses import dataclass

# A registered model's name, as MLflow and `models:/NAME@alias` URIs allow it.
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\- ]*$")
_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


@dataclass(frozen=True)
class TrackingConfig:
    """`uri`: an MLflow tracking server (`http://host:5000`), a `sqlite:///` or `file:` store; empty: nothing is logged.
    Credentials come from MLflow's own environment variables (MLFLOW_TRACKING_USERNAME/PASSWORD or _TOKEN), never from
    the config. `register` names a registered model that each trained model (a sweep's best) becomes a new version of,
    and `alias` is set on that version. Logging runs beside training: a server that cannot be reached gives a warning,
    and the end of a run waits at most `wait_seconds` for what is still unsent."""

    uri: str = ""
    experiment: str = "tfos"
    register: str = ""
    alias: str = ""
    wait_seconds: float = 120.0

    @property
    def enabled(self) -> bool:
        return bool(self.uri)

    def errors(self) -> list[str]:
        errs = []
        if "@" in self.uri.split("://", 1)[-1].split("/", 1)[0]:
            errs.append("tracking.uri: credentials are never written in the config; set MLFLOW_TRACKING_USERNAME "
                        "and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment")
        if not self.experiment.strip():
            errs.append("tracking.experiment: must not be empty")
        if self.register and not _MODEL_NAME.match(self.register):
            errs.append(f"tracking.register: {self.register!r} is not a valid registered model name "
                        "(letters, digits, '_', '.', '-', spaces)")
        if self.register and not self.uri:
            errs.append("tracking.register: registering a model needs tracking.uri (the MLflow server or store)")
        if self.alias and not self.register:
            errs.append("tracking.alias: an alias is set on a registered version; give tracking.register too")
        if self.alias and not _ALIAS.match(self.alias):
            errs.append(f"tracking.alias: {self.alias!r} is not a valid alias (a letter or '_', then letters, "
                        "digits, '_', '-')")
        if self.alias.lower() == "latest" or re.fullmatch(r"v\d+", self.alias.lower()):
            errs.append(f"tracking.alias: {self.alias!r} is reserved by MLflow")
        if self.wait_seconds < 0:
            errs.append(f"tracking.wait_seconds: must be >= 0, got {self.wait_seconds}")
        return errs
