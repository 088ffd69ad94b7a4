"""What a training reports, in one place for writers and readers:

ChiefResult   the chief node -> the driver, over the control channel, when training ends
Metrics       the driver -> `<model_dir>/metrics.json`, read by the Python API (`TrainResult`),
              MLflow (`tracking.model_log`), sweeps and the benchmarks; `tfos evaluate` adds
              its `Evaluation` of a sensor model's anomaly scores to the same file
Both travel as JSON: these are the dicts' keys and types, checked where they are built and read.
"""
from __future__ import annotations

from typing import Any, TypedDict

from tfos_jobs.contracts.epoch_line import LineJson


class Anomaly(TypedDict):
    """A sensor autoencoder's score and threshold: each sensor's weight in the served
    reconstruction error (`sensor_scale`, none when `error_scale = "none"`), and the `quantile`
    of the train windows' served errors that flags a window."""

    quantile: float
    threshold: float
    sensor_scale: dict[str, float] | None


class ChiefResult(TypedDict):
    final: dict[str, float]  # the metrics of the epoch whose model is kept (loss, val_loss, ...)
    test: dict[str, float] | None  # the held-out split, scored once by the kept model
    kept_epoch: int | None  # the epoch early stopping restored, else the last (1-based)
    epochs_run: int  # by this attempt
    steps_per_epoch: int
    gradient_exchange: str  # topology.ALL_GATHER or ALL_REDUCE
    step_profile: dict[str, Any] | None  # cluster.node.step_profile, when train.profile_steps > 0
    anomaly: Anomaly | None  # sensor models only
    sample: dict[str, Any]  # a few eval rows and the model's outputs on them (sample_predictions.json)


class Evaluation(TypedDict):
    """`tfos evaluate`: a sensor model's scores against known anomalies, on the scored windows
    outside its train split (jobs.serve.evaluate); metrics.json's `evaluation`."""

    windows: dict[str, int]  # judged, anomalous, assets, baselines fitted per asset / on the fleet
    scores: dict[str, dict[str, float | None]]  # reconstruction_error and each baseline -> roc_auc, auprc
    per_asset: dict[str, dict[str, dict[str, float | None]]]  # asset -> score -> roc_auc, auprc
    alerts: dict[str, Any]  # is_anomaly: threshold, window and event precision and recall, point-adjusted F1s
    recall_by_kind: dict[str, float]
    not_computed: dict[str, str]  # figure -> why it could not be computed


class MetricsExtras(TypedDict, total=False):
    """The parts of metrics.json only some trainings have."""

    test: dict[str, float]  # a dataset with a held-out split
    anomaly: Anomaly  # a sensor model
    evaluation: "Evaluation"  # a sensor model, once `tfos evaluate` ran


class Metrics(MetricsExtras):
    strategy: str
    nodes: list[dict[str, Any]]  # what each TF node was given: role, index, executor, GPUs, pid, Python
    attempts: int  # TF cluster launches, relaunches included
    epochs: int
    steps_per_epoch: int
    gradient_exchange: str
    seconds: float
    startup: dict[str, float]  # seconds to every node reserved, and to the first step
    final: dict[str, float]
    lost_nodes: list[str]  # parameter-server workers lost with their executors
    control: dict[str, Any]  # control messages refused, and from where
    step_profile: dict[str, Any] | None
    eval: dict[str, float]  # `final`'s val_ metrics, without the prefix
    kept_epoch: int | None
    history: list[LineJson]  # each epoch's line (progress_log.EpochLine.to_json)
    saved_model: str
    model: dict[str, Any]  # [train.model]: kind and params
