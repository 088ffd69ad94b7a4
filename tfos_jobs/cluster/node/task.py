"""A TF node's Spark task (executor side): the function `mapInArrow` runs over the node's
input chunks (`cluster.driver.node_inputs`), one task per node.

The task writes the node's files to its local workspace as they stream in, then starts the node itself as a child
process (`cluster.node.process`) and waits for it. The node runs in a process of its own because one that hosted a TF
node cannot host another (its collective ops and TF server are configured once per process), while Spark keeps and
reuses its Python workers in classic sessions and Connect sessions alike; its memory goes back to the executor when it
ends. The child dies with the task (the kernel kills it when the task's process dies), and the workspace is removed when
the task ends or is killed (`lifecycle.start_reaper`).

A TF node's task runs again only when its executor was lost. Under multi_worker_mirrored (`Launch.rejoins`) the task is
the node's agent for the whole node job: when an attempt fails (the driver says so when asked,
`control_channel.STATUS`), it kills its node's process and runs the next attempt's in a new one, from the inputs already
on its disk; the task Spark runs again for a lost node receives its inputs anew and joins the next attempt
(`control_channel.NEXT`). Otherwise a TF cluster cannot take a node at a new address: the retry of a parameter-server
worker reports the worker lost (the chief goes on with the other workers) and, when it runs on the host the worker ran
on, takes the worker's place at its address (`_retried`); any other retry fails the attempt. A lone node (the `local`
strategy) is simply run again: it resumes from its last published backup.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import IO, Any, Callable, Iterator

from pyarrow import ArrowException
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from tfos_jobs import control_channel as cc
from tfos_jobs import python_daemon
from tfos_jobs.cluster.node import lifecycle, local_disk
from tfos_jobs.cluster.node.control_client import ControlClient, DriverLink
from tfos_jobs.contracts.node_args import Launch
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.topology import Role, Strategy, node_name, roles

# One row per node: its partition, name, exit code (0, or EXIT_REPORTED), host and bytes received.
RESULT_SCHEMA = StructType([StructField("node", IntegerType()), StructField("name", StringType()),
                            StructField("exit", IntegerType()), StructField("host", StringType()),
                            StructField("received", LongType())])
PROCESS_MODULE = "tfos_jobs.cluster.node.process"
EXIT_REPORTED = 1  # the node failed and told the driver why
PR_SET_PDEATHSIG = 1
STDERR_LINES = 200  # of the node's stderr, kept for a failure it could not report
AGENT_POLL = 0.5  # seconds between a rejoining task's questions to the driver


def run_node(launch: Launch, secret: bytes, batches: Iterator[Any]) -> Iterator[Any]:
    """The task of one node (`functools.partial(run_node, launch, secret)` is the job's function;
    `secret` reaches the executor only inside it)."""
    import pyarrow as pa
    from pyspark import TaskContext
    from pyspark.sql.pandas.types import to_arrow_schema

    task = TaskContext.get()
    partition = task.partitionId() if task is not None else 0
    name = node_name(*roles(launch.strategy, launch.nodes, launch.num_ps)[partition])
    code, received = _node(launch, secret, partition, name, task, batches)
    row = {"node": [partition], "name": [name], "exit": [code], "host": [socket.gethostname()], "received": [received]}
    yield pa.RecordBatch.from_pydict(row, schema=to_arrow_schema(RESULT_SCHEMA))


def _node(launch: Launch, secret: bytes, partition: int, name: str, task: Any, batches: Iterator[Any]
          ) -> tuple[int, int]:
    """The node's exit code (EXIT_REPORTED: it told the driver why it failed) and bytes received."""
    from tfos_jobs.cluster.node import inputs

    retry = task.attemptNumber() if task is not None else 0
    place: dict[str, Any] | None = None  # a lost parameter-server worker's, which this retry takes
    if retry and launch.strategy != Strategy.LOCAL and not launch.rejoins:
        code, place = _retried(launch, secret, name)
        if place is None:
            return code, 0
    # A retry's own directory: the lost task's reaper may still be clearing the one it left.
    workspace = launch.workspace(f"{name}.{retry}" if retry and (launch.rejoins or place) else name)
    workspace.enter()
    lifecycle.start_reaper(os.getpid(), workspace)  # a cancelled task's files go too
    process = _NodeProcess(workspace)  # imports TensorFlow while the inputs arrive
    try:
        try:
            _, received = inputs.receive(batches, launch.inputs[partition], workspace.root)
        except ArrowException:  # the stream broke: the JVM failed to read a file (Spark records why), not this node
            raise
        except Exception as e:
            _report(launch, secret, name, local_disk.explained(e, traceback.format_exc(), launch.local_dir))
            return EXIT_REPORTED, 0
        if not launch.rejoins:
            return _run(process, launch, secret, partition, name, task, workspace, place=place), received
        with contextlib.closing(ControlClient(launch.server, secret, relayed=launch.relayed)) as client:
            agent = _Agent(DriverLink(client, {cc.SENDER_NODE: name}), retry)
            current: Launch | None = None if retry else launch  # a retry joins the next attempt
            code, fresh = 0, True  # fresh: `process` has not run a node yet
            while True:
                while current is None:
                    over, current = agent.ask()
                    if over:  # the usual end: the attempt finished
                        return code, received
                    if not fresh and code != 0:  # a failed attempt: the next one comes
                        process, fresh = _fresh_process(workspace), True
                    if current is None:
                        time.sleep(AGENT_POLL)
                if not fresh:
                    process = _fresh_process(workspace)
                code = _run(process, current, secret, partition, name, task, workspace, agent.failed)
                agent.ran, current, fresh = current.run_id, None, False
    finally:
        process.kill()
        workspace.leave()


def _run(process: _NodeProcess, launch: Launch, secret: bytes, partition: int, name: str, task: Any,
         workspace: Workspace, failed: Callable[[str], bool] | None = None, place: dict[str, Any] | None = None
         ) -> int:
    """One attempt's node in `process`; `failed(run id)` says when the driver ended the attempt
    (the process is then killed: it may be stuck in a collective with a peer that is gone);
    `place`: a lost parameter-server worker's, which the node takes (`_retried`)."""
    spec = {"launch": launch.to_json(), "partition": partition, "secret": secret.hex(), "workspace": workspace.node,
            "task": _context(task, partition), "place": place}
    code, said, ended = process.run(spec, (lambda: failed(launch.run_id)) if failed else None)
    # A process that ended on its own after its attempt did (refused its report, say) has nothing to add.
    if code not in (0, EXIT_REPORTED) and not ended and not (failed is not None and failed(launch.run_id)):
        _report(launch, secret, name, last_traceback(said) or _crashed(code))
    return code


class _Agent:
    """A rejoining node's task between attempts: asks the driver what comes next."""

    def __init__(self, link: DriverLink, task_attempt: int):
        self.link, self.task_attempt, self.ran = link, task_attempt, ""

    def ask(self) -> tuple[bool, Launch | None]:
        """(the node job is over, the next attempt's launch if the driver has started one)."""
        reply = self.link.next_attempt(self.ran, self.task_attempt)
        return bool(reply.get("end")), Launch.from_json(reply["launch"]) if reply.get("launch") else None

    def failed(self, run_id: str) -> bool:
        return self.link.status_of(run_id) == cc.RUN_FAILED


def _fresh_process(workspace: Workspace) -> _NodeProcess:
    """A new node process (it imports TensorFlow while the driver starts the next attempt), in
    a node directory cleared of the last attempt's files: its resume state comes from the driver
    again, its logs and export were published or are lost with it. The inputs stay."""
    shutil.rmtree(workspace.own, ignore_errors=True)
    return _NodeProcess(workspace)


def _retried(launch: Launch, secret: bytes, name: str) -> tuple[int, dict[str, Any] | None]:
    """A node's task run again (its executor was lost): a parameter-server worker reports itself lost, and the chief
    goes on without it; the retry then takes its place when it can (the lost worker's place in the TF cluster, returned:
    the chief's coordinator re-admits a worker only at its own address, free again on this host when the worker ran
    here). Any other node fails the attempt."""
    with contextlib.closing(ControlClient(launch.server, secret, relayed=launch.relayed, run=launch.run_id)) as client:
        link = DriverLink(client, {cc.SENDER_NODE: name})
        if launch.strategy == Strategy.PARAMETER_SERVER and name.startswith(Role.WORKER.value):
            link.lost()
            place = link.place()
            return 0, place if place and _bindable(place["cluster"][place["role"]][place["index"]]) else None
        link.failed(f"RuntimeError: TF node {name} was lost with its executor; a TF cluster cannot take a "
                    "replacement node")
        return EXIT_REPORTED, None


def _bindable(address: str) -> bool:
    """Whether this host can listen at `address` ("host:port") now: the address is one of its
    own and nothing listens there."""
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), int(port)))
            return True
        except (OSError, ValueError):
            return False


class _NodeProcess:
    """The node's child process, started before its inputs arrive: it imports TensorFlow, then
    waits for its spec (JSON on its standard input). The last lines it writes to stderr are kept
    (and go on to the task's own stderr, the executor's log)."""

    def __init__(self, workspace: Workspace):
        # The task's own path (addPyFile and artifacts too), with the installed pyspark first.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in python_daemon.installed_first(sys.path) if p)}
        os.makedirs(workspace.own, exist_ok=True)
        self.child = subprocess.Popen([sys.executable, "-m", PROCESS_MODULE], stdin=subprocess.PIPE,
                                      stderr=subprocess.PIPE, cwd=workspace.own, env=env, preexec_fn=_die_with_parent,
                                      close_fds=True)
        assert self.child.stdin is not None and self.child.stderr is not None  # both PIPE
        self.said: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.relay = threading.Thread(target=_tee, args=(self.child.stderr, self.said), daemon=True)
        self.relay.start()

    def run(self, spec: dict[str, Any], ended: Callable[[], bool] | None = None) -> tuple[int, list[str], bool]:
        """Hand the node its spec and wait for it: its exit code, last stderr lines, and whether
        it was killed because `ended()` said its attempt is over (asked every AGENT_POLL s)."""
        assert self.child.stdin is not None
        try:
            with self.child.stdin:
                self.child.stdin.write(json.dumps(spec).encode())
        except BrokenPipeError:  # it died before reading: its exit code and stderr say why
            pass
        killed = False
        while True:
            try:
                code = self.child.wait(AGENT_POLL if ended is not None else None)
                break
            except subprocess.TimeoutExpired:
                if ended is not None and ended():
                    self.kill()
                    killed = True
        self.relay.join(10)
        return code, list(self.said), killed

    def kill(self) -> None:
        if self.child.poll() is None:
            self.child.kill()
            self.child.wait()


def _tee(stream: IO[bytes], kept: collections.deque[str]) -> None:
    for raw in stream:
        line = raw.decode(errors="replace")
        sys.stderr.write(line)
        kept.append(line.rstrip("\n"))
    sys.stderr.flush()


def last_traceback(lines: list[str]) -> str:
    """The last Python traceback among a process's stderr lines ("" when there is none)."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    return "\n".join(lines[starts[-1]:]).strip() if starts else ""


def _context(task: Any, partition: int) -> dict[str, Any]:
    """The task's context as `TaskContext.from_json` reads it: the node's process runs inside the
    task as far as its code can tell (its partition, attempt, CPUs, the GPUs Spark assigned)."""
    if task is None:
        return {"stageId": 0, "partitionId": partition, "attemptNumber": 0, "taskAttemptId": 0, "cpus": 1,
                "resources": {}, "localProperties": {}}
    return {"stageId": task.stageId(), "partitionId": task.partitionId(), "attemptNumber": task.attemptNumber(),
            "taskAttemptId": task.taskAttemptId(), "cpus": task.cpus(),
            "resources": {k: {"name": r.name, "addresses": list(r.addresses)} for k, r in task.resources().items()},
            "localProperties": dict(task._localProperties or {})}


def _die_with_parent() -> None:
    """In the child, before it runs: the kernel kills it when the task's process dies (Spark kills
    a cancelled task's Python worker)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _crashed(code: int) -> str:
    how = (f"was killed by signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exited with code {code}")
    hint = " (out of memory?)" if code == -signal.SIGKILL else ""
    return f"RuntimeError: the TF node's process {how}{hint} before it could report: see the executor's log"


class NodeFailed(Exception):
    """A node that could not tell the driver why it failed: its task fails with the node's own
    traceback as its message, which the driver reads from Spark's record of the task."""


def _report(launch: Launch, secret: bytes, name: str, text: str) -> None:
    """Tell the driver this node failed; if it cannot be told, the task fails (Spark records why)."""
    try:
        with contextlib.closing(ControlClient(launch.server, secret, relayed=launch.relayed,
                                              run=launch.run_id)) as client:
            DriverLink(client, {cc.SENDER_NODE: name}).failed(text)
    except Exception:
        raise NodeFailed(f"\n{text}") from None
