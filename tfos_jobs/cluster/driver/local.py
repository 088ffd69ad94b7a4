"""The launcher for one process and no TF cluster: the driver is the node (`cluster.node.node.run`, alone).

It copies the dataset to its own disk and talks to its own control server (on the loopback
interface: the node is this process), as a node on an executor would, in a thread, so progress
prints as it goes. From a Spark Connect client the dataset comes through the driver."""
from __future__ import annotations

import os
import threading
from typing import Callable

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.driver import node_inputs
from tfos_jobs.cluster.driver.control_server import ControlServer
from tfos_jobs.cluster.driver.launcher import Attempt, Watch
from tfos_jobs.cluster.driver.run_state import LAUNCHED
from tfos_jobs.cluster.driver.supervise import POLL
from tfos_jobs.config import TrainConfig, parse_ports
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.errors import TrainingError
from tfos_jobs.storage import Storage


LOOPBACK = "127.0.0.1"


class LocalLauncher:
    def __init__(self, storage: Storage):
        self.storage = storage

    def check(self, train: TrainConfig, log: Callable[[str], None]) -> None:
        """Any setting runs in this process."""

    def close(self) -> None:
        """Each attempt ends everything it started."""

    def run(self, attempt: Attempt, watch: Watch) -> None:
        from tfos_jobs.cluster.node import node
        from tfos_jobs.cluster.node.control_client import ControlClient, DriverLink

        train, args, state = attempt.train, attempt.args, attempt.state
        state.mark(LAUNCHED)
        secret = cc.new_secret()
        server = ControlServer(secret, state.handle, bind=LOOPBACK, advertise=LOOPBACK,
                               ports=parse_ports(train.control_ports), log=watch.log)
        workspace = Workspace.of(train.local_dir, state.id, "chief-0")
        failure: list[BaseException] = []
        try:
            address = server.start()
            workspace.enter()
            copy_dataset(self.storage, attempt.meta, workspace)
            client = ControlClient(address, secret)
            link = DriverLink(client, {cc.SENDER_NODE: "chief-0"})
            link.fetch(cc.BACKUP, workspace.backup)

            def target() -> None:
                try:
                    node.run(args, node.Node(link=link, workspace=workspace, partition=0), node.Place.alone(),
                             own_process=False)
                except BaseException as e:  # reported below, in the caller's thread
                    failure.append(e)

            thread = threading.Thread(target=target, name="tfos-local-train")
            thread.start()
            while thread.is_alive():
                watch.poll()
                thread.join(POLL)
            client.close()
        finally:
            server.stop()
            workspace.leave()
        if failure:
            e = failure[0]
            raise TrainingError(f"local training failed: {type(e).__name__}: {e}") from e


def copy_dataset(storage: Storage, meta: DatasetMeta, workspace: Workspace) -> None:
    """Every file of the dataset into the workspace: linked when it is on this host's disk."""
    wanted = node_inputs.everything(meta)
    for path, rel in zip(node_inputs.qualified(meta, wanted), wanted.values()):
        target = os.path.join(workspace.root, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        local = storage.on_this_host(path)
        if local is not None:
            os.symlink(os.path.abspath(local), target)
        else:
            storage.download(path, target)
