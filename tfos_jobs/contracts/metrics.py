"""What a training reports, in one place for writers and readers:

NodeRecord    each TF node -> the driver, over the control channel, when it starts; kept in the
              model directory's run records, and in metrics.json's `nodes` as a `NodeSummary`
ChiefResult   the chief node -> the driver, over the control channel, when training ends
Metrics       the driver -> `<model_dir>/metrics.json`, read by the Python API (`TrainResult`),
              MLflow (`tracking.model_log`), sweeps and the benchmarks; `tfos evaluate` adds
              its `Evaluation` of a sensor model's anomaly scores to the same file
All travel as JSON: these are the dicts' keys and types, checked where they are built and read.
"""
from __future__ import annotations

from types import UnionType
from typing import Any, Mapping, TypedDict, Union, cast, get_args, get_origin, get_type_hints, is_typeddict

from tfos_jobs.contracts.epoch_line import LineJson
from tfos_jobs.contracts.values import Json, JsonObject


class NodeSummary(TypedDict):
    """What a TF node was given, as metrics.json's `nodes` keeps it."""

    role: str  # topology.Role
    index: int
    host: str
    executor_id: str  # Spark's ID of the executor it ran on (cluster.node.spark_executor; "driver" in local mode)
    cuda_visible_devices: str  # the GPUs it saw ("" for none)
    pid: int
    python: str  # its interpreter


class NodeRecord(NodeSummary):
    """What a TF node tells the driver of itself when it starts (cluster.node.node)."""

    partition: int  # of the node job
    started: float  # seconds since the epoch
    cluster: dict[str, list[str]]  # the TF cluster spec it joined ({} alone)
    threads: int  # TensorFlow's compute threads set (0: left as they were)


def node_summary(record: NodeRecord) -> NodeSummary:
    fields: Mapping[str, object] = record
    return cast(NodeSummary, {key: fields[key] for key in NodeSummary.__annotations__})


class StepProfile(TypedDict):
    """Where a training step's time goes, measured on the nodes (cluster.node.step_profile): per
    step of one batch on one worker."""

    input_ms: float
    compute_ms: float
    exchange_ms: float
    gradient_bytes: int
    variables: int
    profiled_steps: int
    gradient_exchange: str  # topology.MESH, ALL_GATHER or ALL_REDUCE where gradients are summed across workers, else ""


class StepBreakdown(StepProfile):
    """metrics.json's `step_profile`: the nodes' profile with the step time training measured."""

    step_ms: float
    other_ms: float  # step - compute - exchange: dispatch, callbacks, waiting for the slowest worker


class SamplePredictions(TypedDict):
    """A few eval rows and the trained model's outputs on them (sample_predictions.json)."""

    rows: dict[str, list[Json]]  # feature -> its values, row by row
    outputs: Json  # the model's output tensor as nested lists


class Anomaly(TypedDict):
    """A sensor autoencoder's score and threshold: each sensor's weight in the served
    reconstruction error, the fleet's (`sensor_scale`, for an asset not in `asset_sensor_scale`)
    and each asset's (`error_scale = "per_asset"`), none when `error_scale = "none"`; and the
    `quantile` of the train windows' served errors that flags a window: the fleet's (`threshold`,
    for an asset not in `thresholds`) and each asset's with enough train windows (`thresholds`)."""

    quantile: float
    threshold: float
    thresholds: dict[str, float]
    sensor_scale: dict[str, float] | None
    asset_sensor_scale: dict[str, dict[str, float]] | None


class ChiefResult(TypedDict):
    final: dict[str, float]  # the metrics of the epoch whose model is kept (loss, val_loss, ...)
    test: dict[str, float] | None  # the held-out split, scored once by the kept model
    kept_epoch: int | None  # the epoch early stopping restored, else the last (1-based)
    epochs_run: int  # by this attempt
    steps_per_epoch: int
    gradient_exchange: str  # topology.MESH, ALL_GATHER or ALL_REDUCE
    step_profile: StepProfile | None  # when train.profile_steps > 0
    anomaly: Anomaly | None  # sensor models only
    sample: SamplePredictions


def chief_result(data: object) -> ChiefResult:
    """The chief's result as the driver receives it (decoded JSON), checked against ChiefResult's
    keys and types before anything reads it: a ValueError names each key missing or of another type."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    written = {k: getattr(a, "__forward_arg__", a) for k, a in ChiefResult.__annotations__.items()}  # as typed
    wrong = [f"{k} missing" if k not in data else f"{k} is not {written[k]}"
             for k, hint in get_type_hints(ChiefResult).items() if k not in data or not _fits(data[k], hint)]
    if wrong:
        raise ValueError(", ".join(wrong))
    return cast(ChiefResult, data)


def _fits(value: object, hint: Any) -> bool:
    """Whether decoded JSON `value` is of type `hint`: a TypedDict, dict[str, X], list[X], a union of
    these, str, int, float (an int too), bool or None; any other hint (`Json`) takes any value."""
    origin, args = get_origin(hint), get_args(hint)
    if is_typeddict(hint):
        return isinstance(value, dict) and all(k in value and _fits(value[k], h) for k, h in get_type_hints(hint).items()
                                               if k in hint.__required_keys__)
    if origin in (Union, UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(v, args[1]) for v in value.values())
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if hint in (str, int, float, bool, type(None)):
        number = (int, float) if hint is float else hint
        return isinstance(value, number) and (hint is bool or not isinstance(value, bool))
    return True


class Alerts(TypedDict):
    """A sensor model's `is_anomaly` as alerts (data.anomaly_figures.alerts); a figure the judged
    windows leave undefined is None."""

    threshold: float | None  # the model's fleet-wide one (metrics.json's anomaly.thresholds holds each asset's)
    flagged: int  # windows
    precision: float | None  # by window
    recall: float | None
    incidents: int  # of the truth table, meeting a judged window
    incidents_detected: int
    event_recall: float | None
    alerts: int  # runs of flagged windows
    event_precision: float | None  # runs that meet a true anomaly
    point_adjusted_f1: float | None
    point_adjusted_f1_random: float | None  # a random score flagging as many windows


class Ranking(TypedDict):
    """How well one score ranks the anomalies (data.anomaly_figures), None where undefined: on windows, ROC AUC
    and AUPRC; on readings (a reading scored by the highest of the windows covering it), TSB-AD's VUS-PR and
    VUS-ROC (data.vus), for the fleet the mean over its assets, as TSB-AD averages over series."""

    roc_auc: float | None
    auprc: float | None
    vus_pr: float | None
    vus_roc: float | None


class Evaluation(TypedDict):
    """`tfos evaluate`: a sensor model's scores against known anomalies, on the scored windows
    outside its train split (jobs.serve.evaluate); metrics.json's `evaluation`."""

    windows: dict[str, int]  # judged, anomalous, assets, baselines fitted per asset / on the fleet
    readings: dict[str, int]  # judged (covered by a judged window), anomalous, assets_with_both (what VUS averages)
    scores: dict[str, Ranking]  # reconstruction_error and each baseline
    per_asset: dict[str, dict[str, Ranking]]  # asset -> score
    alerts: Alerts
    recall_by_kind: dict[str, float]
    not_computed: dict[str, str]  # figure -> why it could not be computed


class ControlReport(TypedDict):
    """Control messages the driver refused during the run, and from where."""

    rejected_messages: int
    rejected_from: list[str]  # the peers' hosts


def control_report(rejected: Mapping[str, int]) -> ControlReport:
    """`rejected`: the count of refused messages by peer host."""
    return ControlReport(rejected_messages=sum(rejected.values()), rejected_from=sorted(rejected))


# Why a relaunch happened (Recovery.cause): an attempt failed; elastic training went on with fewer
# workers than the last attempt had (a lost node's executor did not come back) or more (executors joined).
FAILURE, SHRINK, GROW = "failure", "shrink", "grow"


class Recovery(TypedDict):
    """A relaunch after an attempt that trained, as metrics.json keeps it: why, how far the earlier attempt got (as of
    the chief's last heartbeat), where the relaunch resumed (its last checkpoint), how long no step was trained, with
    how many workers, and which nodes kept their task (`cluster.driver.generations`)."""

    attempt: int  # the relaunch's number
    failed_at_steps: int  # steps done as of the failed attempt's last heartbeat (or its last checkpoint, if later)
    resumed_at_steps: int  # steps trained before the relaunch's first step
    trained_again: int  # steps the failed attempt did that the relaunch trained again (at least this many)
    seconds_without_steps: float  # the failed attempt's last heartbeat to the relaunch's first step
    resumed_time: float  # when the relaunch's first step finished (seconds since the epoch)
    nodes_kept: list[str]  # nodes whose task went on into the relaunch: its Python worker, its inputs on disk
    nodes_restarted: list[str]  # nodes started on a new task (a lost executor's; all of them for a new node job)
    cause: str  # FAILURE, SHRINK or GROW (the last cause since that attempt)
    workers: int  # the relaunch's TF workers (train.workers unless elastic training resized the cluster)


class ModelSummary(TypedDict):
    """[train.model] as metrics.json keeps it."""

    kind: str
    params: JsonObject  # [train.model.params]


class MetricsExtras(TypedDict, total=False):
    """The parts of metrics.json only some trainings have."""

    test: dict[str, float]  # a dataset with a held-out split
    anomaly: Anomaly  # a sensor model
    evaluation: "Evaluation"  # a sensor model, once `tfos evaluate` ran


class Metrics(MetricsExtras):
    strategy: str
    nodes: list[NodeSummary]
    attempts: int  # TF cluster launches, relaunches included
    checkpoint_steps: int  # steps between resume checkpoints (0: at epoch ends only)
    recoveries: list[Recovery]  # one per relaunch that trained
    resumed_at_steps: int  # steps trained before this run started (a rerun of an unfinished run)
    epochs: int
    steps_per_epoch: int
    gradient_exchange: str
    seconds: float
    startup: dict[str, float]  # seconds to every node reserved, and to the first step
    final: dict[str, float]
    lost_nodes: list[str]  # parameter-server workers lost with their executors
    replaced_nodes: list[str]  # of those, the ones whose place a new task took
    control: ControlReport
    step_profile: StepBreakdown | None
    eval: dict[str, float]  # `final`'s val_ metrics, without the prefix
    kept_epoch: int | None
    history: list[LineJson]  # each epoch's line (EpochLine.to_json)
    saved_model: str
    model: ModelSummary
