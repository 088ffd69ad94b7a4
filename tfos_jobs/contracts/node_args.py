"""What the driver hands every TF node (a sweep trial's lone node too): plain values only.

They cross to the executors inside a Spark task closure. `NodeArgs` is what training needs, plain values (`to_dict`)
rebuilt and checked on the node (`from_dict`). `Launch` is how the node job starts (`cluster.node.task`), and what the
node's task hands the node's own process (`cluster.node.process`) as JSON (`to_json`)."""
from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass
from typing import Callable, Mapping

from pyspark import cloudpickle

from tfos_jobs.config import TrainConfig
from tfos_jobs.config.loading import build
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.topology import Strategy, parameter_servers

MAX_NODE_SECONDS = 7 * 24 * 3600  # no TF node outlives this, whatever happens to the driver


# What early stopping watches (`early_stopping_patience`); the epoch where it was lowest is the
# model kept, which a sweep ranks its trial by.
STOPPING_METRIC = "val_loss"


@dataclass(frozen=True)
class NodeArgs:
    """The run's `[train]` section as the driver holds it, which the nodes read their settings
    from, and what the driver derives or adds to it."""

    train: TrainConfig
    num_ps: int  # parameter servers (topology.parameter_servers of train.strategy and train.ps)
    dataset: str  # where the dataset lives (a node trains from its local copy; this names files in messages)
    max_node_seconds: float = MAX_NODE_SECONDS
    # A model function given as a Python callable (`tfos_jobs.api.train(build=fn)`), pickled by
    # value with cloudpickle, so one defined in a script or notebook reaches the nodes; None: `train.model.kind`.
    model_fn: bytes | None = None
    # A training function given as a callable (`tfos_jobs.api.train(fn=fn)`), pickled the same way; None: `train.fn`.
    train_fn: bytes | None = None

    @classmethod
    def from_train_config(cls, train: TrainConfig, *, dataset: str, model_fn: Callable | None = None,
                          train_fn: Callable | None = None) -> "NodeArgs":
        return cls(train=train, num_ps=parameter_servers(train.strategy, train.ps), dataset=dataset,
                   model_fn=None if model_fn is None else cloudpickle.dumps(model_fn),
                   train_fn=None if train_fn is None else cloudpickle.dumps(train_fn))

    @property
    def own_training(self) -> bool:
        """Whether a training function of the user's trains (`train.fn` or a pickled one)."""
        return self.train_fn is not None or bool(self.train.fn)

    def to_dict(self) -> dict[str, object]:
        """Plain values: `train` a table of its keys, as in a config file, `model_fn` bytes."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> "NodeArgs":
        """Built and checked as the config loader builds `[train]` from its table."""
        return build(cls, data, "node args")


@dataclass(frozen=True)
class Launch:
    """How the node job starts: which node each partition is, where its control server is, the files Spark hands each
    node (`cluster.driver.node_inputs.plan`), and where it keeps them. Under the `local` strategy the job is one node
    that trains alone, with no TF cluster (a sweep's single-process trial).

    Under multi_worker_mirrored the node job outlives a failed attempt (`rejoins`): its tasks keep their inputs on disk
    and run each later attempt's TF nodes (a new `run_id`, the same `job_id`), and a lost node's task, run again by
    Spark on another executor, joins the next attempt."""

    run_id: str  # the attempt's: every message its nodes send names it (control_channel.SENDER_RUN)
    strategy: str
    nodes: int
    num_ps: int
    server: tuple[str, int]  # the control server: the driver's, or the driver's relay to a Connect client's
    relayed: bool  # the server is a relay: a connection opens with the run's relay token (control_channel)
    tf_ports: list[int]  # [0]: any free port
    local_dir: str  # train.local_dir ("" = the executor's temporary directory)
    inputs: list[dict[str, str]]  # per partition: input file key -> its place in the workspace
    args: NodeArgs
    pruning: bool = False  # a lone node asks the driver after each epoch whether to go on (a sweep's pruner)
    job_id: str = ""  # the node job's: its first attempt's run id, which names the nodes' workspaces

    @property
    def rejoins(self) -> bool:
        """Whether the node job runs the next attempt after a failed one (every TF node is
        started again in place); otherwise a failed attempt ends the job and the next one is a
        new job. A parameter-server run goes on without a lost worker instead (`supervise`)."""
        return self.strategy == Strategy.MULTI_WORKER_MIRRORED

    def workspace(self, node: str) -> Workspace:
        """Where `node` (a node's name, with its task's attempt when Spark ran it again) keeps its files."""
        return Workspace.of(self.local_dir, self.job_id or self.run_id, node)

    def next_attempt(self, run_id: str) -> "Launch":
        return dataclasses.replace(self, run_id=run_id, job_id=self.job_id or self.run_id)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        for key in PICKLED:
            value = getattr(self.args, key)
            data["args"][key] = None if value is None else base64.b64encode(value).decode("ascii")
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> "Launch":
        data = json.loads(text)
        args = data["args"]
        for key in PICKLED:
            if args.get(key) is not None:
                args[key] = base64.b64decode(args[key])
        return cls(**{**data, "server": tuple(data["server"]), "args": NodeArgs.from_dict(args)})


PICKLED = ("model_fn", "train_fn")  # NodeArgs' callables, as bytes (base64 in JSON)
