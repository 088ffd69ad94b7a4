"""Nodes of one host share their run's workspace root: one node leaving must never remove what
another, entering at the same moment, put there."""
from __future__ import annotations

import multiprocessing
import os

from tfos_jobs.contracts.workspace import DATASET, Workspace

ROUNDS = 300


def _node(local_dir: str, name: str, start, problems) -> None:
    start.wait()
    for n in range(ROUNDS):
        workspace = Workspace.of(local_dir, "run", name)
        try:
            workspace.enter()
            shared = os.path.join(workspace.dataset, "part-0")
            os.makedirs(workspace.dataset, exist_ok=True)
            open(shared, "a").close()
            mine = os.path.join(workspace.own, "file")
            open(mine, "w").close()
            for path in (shared, mine):
                if not os.path.exists(path):
                    problems.put(f"round {n}: {name} lost {os.path.relpath(path, local_dir)}")
            workspace.leave()
        except OSError as e:  # the other node removed a directory this one was writing in
            problems.put(f"round {n}: {name}: {type(e).__name__}: {e}")
            return


def test_nodes_entering_and_leaving_at_once_keep_each_others_files_and_leave_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    start, problems = ctx.Event(), ctx.Queue()
    nodes = [ctx.Process(target=_node, args=(str(tmp_path), name, start, problems)) for name in ("chief-0", "worker-0")]
    for p in nodes:
        p.start()
    start.set()
    for p in nodes:
        p.join(120)
    lost = []
    while not problems.empty():
        lost.append(problems.get())
    assert lost == [], f"{len(lost)} losses, e.g. {lost[:3]}"
    assert [p.exitcode for p in nodes] == [0, 0]
    assert os.listdir(tmp_path) == []


def test_the_last_node_out_removes_the_root_and_not_before(tmp_path):
    chief, worker = (Workspace.of(str(tmp_path), "run", name) for name in ("chief-0", "worker-0"))
    chief.enter()
    worker.enter()
    os.makedirs(chief.dataset)
    chief.leave()
    assert not os.path.exists(chief.own)
    assert sorted(os.listdir(worker.root)) == [DATASET, "users", "worker-0"]
    worker.leave()
    assert os.listdir(tmp_path) == []
