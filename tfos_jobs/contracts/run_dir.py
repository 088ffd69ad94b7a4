"""The files of a model directory and of one training attempt's run directory.

The driver and the TF nodes talk through these files on storage both see, so the layout has
one owner; both sides use these classes and never type a file name.

    <model_dir>/
      saved_model/  metrics.json  sample_predictions.json  learning_curve.png  anomalies.png
      progress.jsonl      one line per finished epoch (the chief appends, the driver tails)
      backup/             Keras BackupAndRestore: what a relaunch resumes from
      logs/               TensorBoard event files
      _run/<run id>/      one attempt (RunDir):
        launched, reserved, first_step   times (seconds since the epoch) of the start-up steps
        heartbeat          touched by the chief while steps finish
        result.json        the chief's result: final metrics, epochs run, step profile, sample
        nodes/<node>.json  what each node was given (role, executor, pid, GPUs)
        nodes/<node>.error the traceback of a node that failed
        nodes/<node>.lost  a parameter-server worker lost with its executor
        done               the run's end ("ok" or "failed"): serving-only nodes return on it
"""
from __future__ import annotations

import glob
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

LAUNCHED, RESERVED, FIRST_STEP = "launched", "reserved", "first_step"


def write_json(path: str, data: Any, **dump_options: Any) -> None:
    """Written whole or not at all: a reader never sees half a file."""
    write_text(path, json.dumps(data, **dump_options))


def write_text(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@dataclass(frozen=True)
class ModelDir:
    path: str

    @property
    def saved_model(self) -> str:
        return f"{self.path}/saved_model"

    @property
    def metrics(self) -> str:
        return f"{self.path}/metrics.json"

    @property
    def sample_predictions(self) -> str:
        return f"{self.path}/sample_predictions.json"

    @property
    def learning_curve(self) -> str:
        return f"{self.path}/learning_curve.png"

    @property
    def anomaly_plot(self) -> str:
        """An autoencoder's scores against known anomalies (`tfos evaluate`)."""
        return f"{self.path}/anomalies.png"

    @property
    def progress(self) -> str:
        return f"{self.path}/progress.jsonl"

    @property
    def backup(self) -> str:
        return f"{self.path}/backup"

    @property
    def logs(self) -> str:
        return f"{self.path}/logs"

    @property
    def runs(self) -> str:
        return f"{self.path}/_run"

    def new_run(self) -> "RunDir":
        run = RunDir(f"{self.runs}/{time.strftime('%Y%m%d-%H%M%S-')}{uuid.uuid4().hex[:6]}")
        os.makedirs(run.nodes, exist_ok=True)
        return run

    def has_backup(self) -> bool:
        return os.path.isdir(self.backup) and bool(os.listdir(self.backup))


@dataclass(frozen=True)
class RunDir:
    path: str

    @property
    def id(self) -> str:
        return os.path.basename(self.path)

    @property
    def nodes(self) -> str:
        return f"{self.path}/nodes"

    @property
    def result(self) -> str:
        return f"{self.path}/result.json"

    @property
    def heartbeat(self) -> str:
        return f"{self.path}/heartbeat"

    def logs(self, role: str, index: int) -> str:
        """TensorBoard events of a node that is not the chief (the chief's go to the model dir)."""
        return f"{self.path}/logs-{role}-{index}"

    # start-up times
    def mark_time(self, step: str) -> None:
        write_text(f"{self.path}/{step}", repr(time.time()))

    def time_of(self, step: str) -> float | None:
        try:
            with open(f"{self.path}/{step}", encoding="utf-8") as fh:
                return float(fh.read())
        except (OSError, ValueError):
            return None

    def beat(self) -> None:
        write_text(self.heartbeat, repr(time.time()))

    def last_beat(self) -> float:
        """When the chief last finished a step; 0 before the first."""
        try:
            return os.path.getmtime(self.heartbeat)
        except OSError:
            return 0.0

    # nodes
    @staticmethod
    def node_name(role: str, index: int) -> str:
        return f"{role}-{index}"

    @staticmethod
    def role_of(name: str) -> str:
        return name.rsplit("-", 1)[0]

    def write_node(self, name: str, record: dict[str, Any]) -> None:
        write_json(f"{self.nodes}/{name}.json", record)

    def node_records(self) -> dict[str, dict[str, Any]]:
        """Node name -> its record, in name order."""
        out = {}
        for path in sorted(glob.glob(f"{glob.escape(self.nodes)}/*.json")):
            out[os.path.basename(path).removesuffix(".json")] = read_json(path)
        return out

    def node_of_partition(self, partition: int) -> str | None:
        """The node (e.g. "worker-1") the Spark task of `partition` ran."""
        return next((name for name, r in self.node_records().items() if r.get("partition") == partition), None)

    def error_file(self, name: str) -> str:
        return f"{self.nodes}/{name}.error"

    def write_error(self, name: str, text: str) -> None:
        write_text(self.error_file(name), text)

    def failed_nodes(self) -> list[str]:
        """Error files of the nodes that failed, in name order."""
        return sorted(glob.glob(f"{glob.escape(self.nodes)}/*.error"))

    def node_errors(self) -> dict[str, tuple[str, str]]:
        """Node name -> (its error file, the traceback written there), for every node that failed."""
        out = {}
        for path in self.failed_nodes():
            with open(path, encoding="utf-8") as fh:
                out[os.path.basename(path).removesuffix(".error")] = (path, fh.read())
        return out

    def mark_lost(self, name: str) -> None:
        write_text(f"{self.nodes}/{name}.lost", "")

    def lost_nodes(self) -> list[str]:
        return sorted(os.path.basename(p).removesuffix(".lost") for p in glob.glob(f"{glob.escape(self.nodes)}/*.lost"))

    # the end
    def mark_done(self, status: str) -> None:
        write_text(f"{self.path}/done", status)

    def done(self) -> str | None:
        """The run's end status, None while it runs."""
        try:
            with open(f"{self.path}/done", encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def write_result(self, result: dict[str, Any]) -> None:
        write_json(self.result, result)

    def read_result(self) -> dict[str, Any]:
        return read_json(self.result)
