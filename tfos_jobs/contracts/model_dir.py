"""The files of a model directory, on whatever filesystem it lives (the driver writes them all).

    <model_dir>/
      saved_model/        the SavedModel, published whole by the chief through the driver
      metrics.json  sample_predictions.json  learning_curve.png  anomalies.png
      progress.jsonl      one line per finished epoch (the driver writes what the chief reports)
      backup/             Keras BackupAndRestore's state after the last epoch or step checkpoint
                          (cluster.node.checkpoints): what a relaunch, or running the job again,
                          resumes from
      logs/               TensorBoard event files
      _run/<run id>/nodes/        one attempt's nodes, as they reported to the driver (kept
                          until the run ends well):
        <node>.json       what the node was given (role, executor, pid, GPUs)
        <node>.error      the traceback of a node that failed
"""
from __future__ import annotations

from dataclasses import dataclass


SAVED_MODEL = "saved_model"


@dataclass(frozen=True)
class ModelDir:
    path: str

    @classmethod
    def holding(cls, saved_model: str) -> "ModelDir":
        """The model directory whose SavedModel is at `saved_model` (metrics.json's field)."""
        head, _, tail = saved_model.rstrip("/").rpartition("/")
        if tail != SAVED_MODEL or not head:
            raise ValueError(f"{saved_model!r} is not the {SAVED_MODEL}/ of a model directory")
        return cls(head)

    @property
    def saved_model(self) -> str:
        return f"{self.path}/{SAVED_MODEL}"

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
    def evaluation_plot(self) -> str:
        """The model's ROC AUC, AUPRC, VUS-ROC and VUS-PR beside each baseline's (`tfos evaluate`)."""
        return f"{self.path}/evaluation.png"

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

    def node_record(self, run_id: str, node: str) -> str:
        return f"{self.runs}/{run_id}/nodes/{node}.json"

    def error_file(self, run_id: str, node: str) -> str:
        return f"{self.runs}/{run_id}/nodes/{node}{ERROR_SUFFIX}"


ERROR_SUFFIX = ".error"
