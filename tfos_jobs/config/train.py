"""`[train]` and `[train.model]`: the training run, its TF cluster and the model."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping, Union

from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.names import Name
from tfos_jobs.tasks import ModelKind
from tfos_jobs.topology import AUTO, MESH, DeliveryName, ExchangeName, Strategy, StrategyName, node_count


KIND_KEY = "train.model.kind"  # the setting naming the model, in errors and sweep parameters
PARAMS_KEY = "train.model.params"


class Optimizer(Name):
    """`train.optimizer`: Keras's optimizer of that name (model.builder.make_optimizer)."""

    ADAM = "adam"
    ADAGRAD = "adagrad"
    SGD = "sgd"
    RMSPROP = "rmsprop"
    FTRL = "ftrl"


OPTIMIZERS = tuple(o.value for o in Optimizer)
if TYPE_CHECKING:  # a type checker reads the setting as str; the config loader checks its value
    OptimizerName = str
else:
    OptimizerName = Literal[OPTIMIZERS]


class ModelParams(dict):
    """`[train.model.params]`, the settings of a user's own model function, read-only.

    A dict underneath, so it prints, pickles, compares and turns into JSON (metrics.json, MLflow
    params) as the TOML table it was written as; TOML lists are held as tuples."""

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{PARAMS_KEY} is read-only")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def __reduce__(self) -> tuple:
        return ModelParams, (dict(self),)


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def param_errors(params: Mapping[str, Any]) -> list[str]:
    """Each value must be a TOML string, number or boolean, or a list of them."""
    errs = []
    for key, value in params.items():
        items = value if isinstance(value, (list, tuple)) else (value,)
        if not all(isinstance(v, (str, int, float, bool)) for v in items):
            errs.append(f"{PARAMS_KEY}.{key}: expected a string, number or boolean, or a list of them, got {value!r}")
    return errs


@dataclass(frozen=True)
class ModelConfig:
    """The model: `wide_deep` (built from the spec), `sequence_autoencoder` (for sequence
    features) or a user function given as "module:function".

    `params` (`[train.model.params]`): the user function's own settings, any keys, handed to it
    as `model_cfg.params`; the built-in models take none.

    Hidden layers of the deep part, as in the census wide & deep sample: `num_layers` layers,
    the first of `first_layer_size` units, each next one `scale_factor` times the previous.
    The autoencoder: a `cell` ("gru" or "lstm") encoder of `units` to a `latent_dim` vector, a
    decoder of the same size; windows whose reconstruction error is above the
    `anomaly_quantile` of the train windows' errors are flagged as anomalies. `error_scale`:
    "per_sensor" weighs each sensor's squared error in the served score by the inverse of its
    mean over the train windows (a sensor noisy in normal times no longer drowns the others);
    "per_asset" (the default) the same, lowered on an asset where the sensor's own mean error is
    larger (noisy on that machine only); "none" scores the plain mean squared error. `standardize`: "per_asset" standardises each
    window by its asset's train statistics (an unseen asset by the fleet's), "fleet" by the
    fleet's; each asset's threshold is the `anomaly_quantile` of its own train windows' errors
    either way (the fleet's for an asset with too few). `clip`: the standardised values are
    clipped to +-clip (0: not clipped), so that one reading far beyond any in training is still
    its window's largest error without drowning the window's other sensors; past the clip, the
    served score goes on growing with the log of the excess (`layers.WindowScore`)."""

    kind: str = ModelKind.WIDE_DEEP.value
    first_layer_size: int = 100
    num_layers: int = 4
    scale_factor: float = 0.7
    dropout: float = 0.0
    cell: Literal["gru", "lstm"] = "gru"
    units: int = 32
    latent_dim: int = 16
    anomaly_quantile: float = 0.99
    error_scale: Literal["per_asset", "per_sensor", "none"] = "per_asset"
    standardize: Literal["per_asset", "fleet"] = "per_asset"
    clip: float = 10.0
    params: Mapping[str, Any] = ModelParams()

    def __post_init__(self) -> None:
        if not isinstance(self.params, ModelParams):
            if not isinstance(self.params, Mapping):
                raise TypeError(f"{PARAMS_KEY}: expected a table, got {self.params!r}")
            object.__setattr__(self, "params", ModelParams({str(k): _frozen(v) for k, v in self.params.items()}))

    @property
    def is_user_function(self) -> bool:
        """A user's "module:function" rather than a model the package builds."""
        return self.kind not in (ModelKind.WIDE_DEEP, ModelKind.SEQUENCE_AUTOENCODER) and ":" in self.kind

    def hidden_units(self) -> tuple[int, ...]:
        return tuple(max(2, round(self.first_layer_size * self.scale_factor**i)) for i in range(self.num_layers))

    def errors(self, spec: FeatureSpec, *, own_training: bool = False) -> list[str]:
        """`own_training`: a training function of the user's trains (`train.fn`), which takes the params too."""
        errs = [f"train.model.{k}: must be >= 1, got {v}" for k, v in (
            ("first_layer_size", self.first_layer_size), ("num_layers", self.num_layers), ("units", self.units),
            ("latent_dim", self.latent_dim)) if v < 1]
        if not 0 < self.scale_factor <= 1:
            errs.append(f"train.model.scale_factor: must be in (0, 1], got {self.scale_factor}")
        if not 0 <= self.dropout < 1:
            errs.append(f"train.model.dropout: must be in [0, 1), got {self.dropout}")
        wide_deep, sequence_model = ModelKind.WIDE_DEEP, ModelKind.SEQUENCE_AUTOENCODER
        if self.kind not in (wide_deep, sequence_model) and ":" not in self.kind:
            errs.append(f"train.model.kind: {self.kind!r} is not '{wide_deep}', '{sequence_model}' or 'module:function'")
        elif spec.is_sequence and self.kind == wide_deep or not spec.is_sequence and self.kind == sequence_model:
            errs.append(f"train.model.kind: {self.kind!r} does not fit a spec "
                        + (f"of sequence features; use '{sequence_model}'" if spec.is_sequence
                           else "without sequence features"))
        if not 0 < self.anomaly_quantile < 1:
            errs.append(f"train.model.anomaly_quantile: must be between 0 and 1 (exclusive), got {self.anomaly_quantile}")
        if self.error_scale not in ("per_asset", "per_sensor", "none"):
            errs.append(f"train.model.error_scale: must be \"per_asset\", \"per_sensor\" or \"none\", "
                        f"got {self.error_scale!r}")
        if self.standardize not in ("per_asset", "fleet"):
            errs.append(f"train.model.standardize: must be \"per_asset\" or \"fleet\", got {self.standardize!r}")
        if not self.clip >= 0:
            errs.append(f"train.model.clip: must be >= 0 (0: not clipped), got {self.clip}")
        errs += param_errors(self.params)
        if self.params and not self.is_user_function and not own_training:
            errs.append(f"{PARAMS_KEY}: {', '.join(sorted(self.params))}: the built-in model {self.kind!r} takes no "
                        "params (they are a 'module:function' model's own settings); its settings are the other "
                        "train.model keys")
        return errs


GLOBAL_BATCH, PER_WORKER_BATCH = "global", "per_worker"  # `train.elastic.batch`: what a resize keeps
ELASTIC_BATCH = (GLOBAL_BATCH, PER_WORKER_BATCH)
if TYPE_CHECKING:
    ElasticBatch = str
else:
    ElasticBatch = Literal[ELASTIC_BATCH]


@dataclass(frozen=True)
class ElasticConfig:
    """`[train.elastic]`, multi_worker_mirrored only: training goes on with fewer workers when a lost node's executor
    does not come back, and grows again when executors join.

    `wait_seconds`: how long an attempt waits for every node (a lost node's executor to come back, or the run's first
    executors) before it goes on with the nodes that did start; 0 = off (an attempt waits `reservation_timeout` for all
    of them, then fails). `min_workers`: with fewer executors than this the attempt waits on, and fails after
    `reservation_timeout` as without elastic training. `batch`: on a resize, "global" keeps the global batch (each
    worker's batch is `batch_size * workers / workers now`: the same steps per epoch and the same updates), "per_worker"
    keeps `batch_size` per worker (the global batch shrinks and grows with the cluster)."""

    wait_seconds: int = 0
    min_workers: int = 1
    batch: ElasticBatch = GLOBAL_BATCH

    @property
    def on(self) -> bool:
        return self.wait_seconds > 0

    def errors(self, strategy: str, workers: int) -> list[str]:
        errs = []
        if self.wait_seconds < 0:
            errs.append(f"train.elastic.wait_seconds: must be >= 0 (0 = off), got {self.wait_seconds}")
        if not 1 <= self.min_workers <= workers:
            errs.append(f"train.elastic.min_workers: must be between 1 and train.workers ({workers}), got "
                        f"{self.min_workers}")
        if self.batch not in ELASTIC_BATCH:
            errs.append(f"train.elastic.batch: must be one of {', '.join(ELASTIC_BATCH)}, got {self.batch!r}")
        if self.on and strategy != Strategy.MULTI_WORKER_MIRRORED:
            errs.append(f"train.elastic.wait_seconds: elastic training needs strategy = "
                        f"\"{Strategy.MULTI_WORKER_MIRRORED.value}\" (a parameter-server run goes on without a lost "
                        f"worker as it is), got {strategy!r}")
        return errs


@dataclass(frozen=True)
class TrainConfig:
    dataset: str = "demo-output/dataset"
    model_dir: str = "demo-output/model"
    strategy: StrategyName = Strategy.MULTI_WORKER_MIRRORED.value
    workers: int = 2  # TF workers, the chief included (parameter_server: workers besides the chief)
    ps: int = 1  # parameter servers (parameter_server only)
    gpus_per_worker: int = 0
    gpu_discovery_script: str = ""  # what Spark runs to find an executor's GPUs; "" = the one the package ships
    epochs: int = 5
    steps_per_epoch: Union[int, None] = None  # default: one pass over the train split per epoch
    batch_size: int = 512  # per worker (parameter_server: per step, each step on one worker)
    optimizer: OptimizerName = Optimizer.ADAM.value
    learning_rate: float = 0.001
    early_stopping_patience: int = 0  # epochs without improvement of val_loss; 0 = off
    score_test: bool = True  # score the dataset's held-out test split, if any, once after training (sweeps: off)
    shuffle_buffer: int = 10_000  # records, when a worker's share of the train split streams from its files
    in_memory_mb: int = 1024  # a worker's share of a split up to this many MB of TFRecords is read once into memory
    seed: int = 42
    reservation_timeout: int = 120  # seconds to wait for executors and TF nodes to start
    step_timeout: int = 600  # seconds without a finished step before the run is declared hung
    max_attempts: int = 3  # TF cluster launches; a relaunch resumes from the last checkpoint
    # steps between resume checkpoints, besides every epoch's end (rounded up to steps_per_execution);
    # 0 = at epoch ends only, as always under parameter_server (its coordinator allows no step callbacks)
    checkpoint_steps: int = 500
    steps_per_execution: int = 20  # training steps per call into TensorFlow (per scheduled function under PS)
    dense_gradient_limit: int = 262_144  # embedding tables of up to this many values send dense gradients
    # multi_worker_mirrored: how the gradients are summed across workers (model/exchange.py);
    # auto = one all-gather with two workers or small gradients, else the ring all-reduce
    gradient_exchange: ExchangeName = "auto"
    threads: int = 0  # TensorFlow compute threads per TF node; 0 = the Spark task's CPUs (spark.task.cpus)
    profile_steps: int = 0  # > 0: after training, time this many steps' parts (metrics.json step_profile)
    control_bind: str = ""  # reservation server address; "" = spark.driver.bindAddress, else spark.driver.host
    control_ports: str = ""  # reservation server port or range ("9000-9010"); "" = any free port
    tf_ports: str = ""  # port range for the TF nodes' gRPC servers ("30000-30999"); "" = any free port
    tensorboard: bool = True  # event files in <model_dir>/logs
    # where TF nodes keep their copy of the dataset and their own files on an executor's disk;
    # "" = the executor's temporary directory. Parameter-server workers need the same path on every host.
    local_dir: str = ""
    # how the input files reach that disk: "spool" = the executor copies each file to its own local
    # directory and the node moves it into place; "chunks" = the node's task receives them in 4 MiB
    # Arrow chunks, for Python workers that cannot see their executor's local directories
    node_inputs: DeliveryName = "spool"
    overwrite: bool = False
    # "module:function": a training function of your own, called as fn(ctx) on every TF node in place of the
    # package's build, fit and export (docs/training.md, "Your own training function"); "" = the package's
    fn: str = ""
    model: ModelConfig = ModelConfig()
    elastic: ElasticConfig = ElasticConfig()

    def resized(self, workers: int) -> "TrainConfig":
        """This run with `workers` workers (elastic training): the batch per worker as `elastic.batch` says."""
        if workers == self.workers:
            return self
        batch = self.batch_size
        if self.elastic.batch == GLOBAL_BATCH:
            batch = max(1, round(self.batch_size * self.workers / workers))
        return dataclasses.replace(self, workers=workers, batch_size=batch)

    def checkpoint_interval(self) -> int:
        """Steps between resume checkpoints as training takes them (a whole number of calls of
        `steps_per_execution` steps); 0: at epoch ends only."""
        if self.strategy == Strategy.PARAMETER_SERVER or self.checkpoint_steps <= 0 or self.steps_per_execution < 1:
            return 0
        return -(-self.checkpoint_steps // self.steps_per_execution) * self.steps_per_execution

    def nodes(self) -> int:
        """Processes the run takes (topology.node_count): the TF cluster's nodes, or 1 for `local`."""
        return node_count(self.strategy, self.workers, self.ps)

    def errors(self, spec: FeatureSpec) -> list[str]:
        positive = {"workers": self.workers, "epochs": self.epochs, "batch_size": self.batch_size,
                    "reservation_timeout": self.reservation_timeout, "step_timeout": self.step_timeout,
                    "max_attempts": self.max_attempts, "steps_per_execution": self.steps_per_execution}
        errs = [f"train.{k}: must be >= 1, got {v}" for k, v in positive.items() if v < 1]
        if self.strategy == Strategy.PARAMETER_SERVER and self.ps < 1:
            errs.append(f"train.ps: parameter_server needs at least 1 parameter server, got {self.ps}")
        for key in ("control_ports", "tf_ports"):
            try:
                ports = parse_ports(getattr(self, key))
            except ValueError as e:
                errs.append(f"train.{key}: {e}")
                continue
            meshed = (self.strategy == Strategy.MULTI_WORKER_MIRRORED and self.workers > 1
                      and self.gradient_exchange in (AUTO, MESH))
            per_node = 2 if meshed else 1  # its TF server's, and its gradient mesh's
            if (key == "tf_ports" and ports != [0] and len(ports) < per_node * self.nodes()
                    and self.strategy != Strategy.LOCAL):
                errs.append(f"train.tf_ports: {self.tf_ports!r} holds {len(ports)} port(s), fewer than the TF "
                            f"cluster's {self.nodes()} nodes need; each node takes "
                            + ("two of its own (its TF server and its gradient mesh)" if meshed else "a port of its own"))
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            errs.append(f"train.steps_per_epoch: must be >= 1 (or left out for one pass per epoch), got "
                        f"{self.steps_per_epoch}")
        if self.learning_rate <= 0:
            errs.append(f"train.learning_rate: must be > 0, got {self.learning_rate}")
        for key in ("gpus_per_worker", "early_stopping_patience", "dense_gradient_limit", "threads", "profile_steps",
                    "in_memory_mb", "checkpoint_steps"):
            if getattr(self, key) < 0:
                errs.append(f"train.{key}: must be >= 0, got {getattr(self, key)}")
        module, sep, function = self.fn.partition(":")
        if self.fn and not (sep and module and function):
            errs.append(f"train.fn: {self.fn!r} is not 'module:function'")
        return errs + self.elastic.errors(self.strategy, self.workers) + self.model.errors(spec, own_training=bool(self.fn))


def parse_ports(spec: str) -> list[int]:
    """A port setting: "" (any free port: [0]), "9000", or a range "9000-9010"."""
    spec = spec.strip()
    if not spec:
        return [0]
    low, _, high = spec.partition("-")
    try:
        first, last = int(low), int(high or low)
    except ValueError:
        raise ValueError(f"{spec!r} is not a port or a range of ports like 9000-9010") from None
    if not 0 < first <= last < 65536:
        raise ValueError(f"{spec!r} is not a port or a range of ports within 1-65535, low-high")
    return list(range(first, last + 1))
