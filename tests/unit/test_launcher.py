"""Attempts, relaunches, start-up and step timeouts, failed and lost nodes: the driver's side of a
TF cluster with the nodes played by threads (`FakeNodes`) behind the launcher seam, so every
path runs in seconds. tests/cluster/ runs the same paths with real TF nodes on executors."""
from __future__ import annotations

import threading
from typing import Callable

import pytest

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.driver import supervise as supervise_mod
from tfos_jobs.cluster.driver.launcher import Attempt, Watch, run_attempts
from tfos_jobs.cluster.driver.run_state import RunState
from tfos_jobs.cluster.driver.supervise import LostWorkers, supervise
from tfos_jobs.config import ElasticConfig, TrainConfig
from tfos_jobs.errors import TrainingError
from tfos_jobs.topology import Strategy

MWM = TrainConfig(strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2, reservation_timeout=20, step_timeout=20)
PS = TrainConfig(strategy=Strategy.PARAMETER_SERVER.value, workers=2, ps=1, reservation_timeout=20, step_timeout=20)
PEER_GONE = "Traceback (most recent call last):\n  ...\ntensorflow.python.framework.errors_impl.UnavailableError: peer gone"
CODE_ERROR = "Traceback (most recent call last):\n  ...\nValueError: shapes (3,) and (4,) are incompatible"
RESULT = {"final": {"loss": 0.4}, "test": None, "kept_epoch": 1, "epochs_run": 1, "steps_per_epoch": 10,
          "gradient_exchange": "all_reduce", "step_profile": None, "anomaly": None, "sample": {"rows": {}, "outputs": []}}


class FakeNodes:
    """An attempt's nodes as one thread playing `script`, which reports to the attempt's state
    as the nodes' control messages would; `cancel` ends the script's waits."""

    def __init__(self, state: RunState, script: Callable[[FakeNodes], None], cluster: "FakeLauncher | None" = None):
        self.state, self.script, self.cluster = state, script, cluster
        self.ended, self.cancelled = threading.Event(), threading.Event()
        self.task_failures = 0
        self.task_errors: dict[str, str] = {}
        self.thread = threading.Thread(target=self._play, daemon=True)
        self.thread.start()

    def _play(self) -> None:
        try:
            self.script(self)
        finally:
            self.ended.set()

    def send(self, kind: str, node: str, **fields) -> None:
        self.state.handle(kind, {cc.SENDER_NODE: node, **fields})

    def register(self, *names: str) -> None:
        for i, _ in enumerate(names):
            self.state.handle(cc.REGISTER, {"data": {"executor_id": i, "host": "127.0.0.1", "job_name": "worker",
                                                     "task_index": i, "port": 2000 + i}})

    def finish(self) -> None:
        self.send(cc.BEAT, "chief-0", steps=10)
        self.send(cc.RESULT, "chief-0", result=RESULT)
        self.send(cc.DONE, "chief-0", status=cc.RUN_OK)

    def hold(self) -> None:
        """Keep running until the driver cancels the attempt."""
        assert self.cancelled.wait(60), "the driver never cancelled the nodes"

    # -- the NodeJob the supervisor watches ---------------------------------------------------------

    def running(self) -> bool:
        return not self.ended.is_set()

    def wait(self, seconds: float) -> None:
        self.ended.wait(seconds)

    def error(self) -> BaseException | None:
        return None

    def failed_tasks(self) -> int:
        return self.task_failures

    def record_task_errors(self, state: RunState) -> None:
        for node, text in self.task_errors.items():
            state.task_failed(node, text)

    def cancel(self) -> None:
        self.cancelled.set()
        self.thread.join(30)

    def executors(self) -> int:
        assert self.cluster is not None
        count = self.cluster.executors
        if count > len(self.state.reservations()):
            self.cluster.more_counted.set()
        return count


class FakeLauncher:
    """Plays one script per attempt, in order, under the real supervisor. With `keep`, a
    failed attempt's nodes are left running (as a rejoining node job's are) until `close`."""

    def __init__(self, *scripts: Callable[[FakeNodes], None], keep: bool = False, executors: int = 2):
        self.scripts, self.keep, self.executors = list(scripts), keep, executors
        self.launched: list[FakeNodes] = []
        self.sizes: list[int] = []  # each attempt's workers
        self.more_counted = threading.Event()  # the supervisor counted more executors than nodes
        self.closed = 0

    def run(self, attempt: Attempt, watch: Watch) -> None:
        self.sizes.append(attempt.train.workers)
        nodes = FakeNodes(attempt.state, self.scripts[len(self.launched)], self)
        self.launched.append(nodes)
        supervise(nodes, attempt, watch, keep=(lambda e: self.keep))

    def close(self) -> None:
        self.closed += 1
        for nodes in self.launched:
            if nodes.running():
                nodes.cancel()


class Published:
    """The run's transfers as far as these tests go: every file message is taken."""

    def handle(self, kind: str, message: dict) -> None:
        return None


def attempts(tr: TrainConfig) -> Callable[[int, int | None], Attempt]:
    def attempt(number: int, workers: int | None) -> Attempt:
        sized = tr.resized(workers or tr.workers)
        state = RunState(f"run-{number}", sized.nodes(), progress=None, transfers=Published())
        return Attempt(number, sized, args=None, meta=None, state=state,
                       error_file=lambda run_id, node: f"/model/_run/{run_id}/{node}.error", workers_wanted=tr.workers)
    return attempt


def run(launcher: FakeLauncher, tr: TrainConfig = MWM, max_attempts: int = 3, **watch) -> tuple[Attempt, list[str]]:
    lines: list[str] = []
    finished = run_attempts(launcher, max_attempts=max_attempts, attempt=attempts(tr),
                            watch=Watch(log=lines.append, **watch))
    return finished, lines


def peer_gone_then_hold(nodes: FakeNodes) -> None:
    nodes.register("chief-0", "worker-1")
    nodes.send(cc.FAILED, "worker-1", text=PEER_GONE)
    nodes.hold()


def trains_well(nodes: FakeNodes) -> None:
    nodes.register("chief-0", "worker-1")
    nodes.finish()


def test_an_attempt_whose_nodes_end_well_is_the_only_one():
    launcher = FakeLauncher(trains_well)
    finished, lines = run(launcher)
    assert finished.number == 1 and finished.state.result() == RESULT
    assert finished.state.done() == cc.RUN_OK and lines == []
    assert not launcher.launched[0].cancelled.is_set()


def test_a_peer_failure_is_relaunched_and_the_next_attempt_finishes():
    launcher = FakeLauncher(peer_gone_then_hold, trains_well)
    finished, lines = run(launcher)
    assert finished.number == 2 and finished.state.id == "run-2"
    assert lines == ["attempt 1 of 3 failed: TF node worker-1 failed: tensorflow.python.framework.errors_impl."
                     "UnavailableError: peer gone\n  full traceback: /model/_run/run-1/worker-1.error\n"
                     "relaunching the TF cluster; training resumes from the last checkpoint"]
    first = launcher.launched[0]
    assert first.cancelled.is_set() and first.state.done() == cc.RUN_FAILED  # its other nodes were ended


def test_a_relaunch_says_where_it_resumed_and_what_it_trained_again():
    def steps_then_peer_gone(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-1")
        nodes.send(cc.FIRST_STEP, "chief-0", resumed_at=0)
        for steps in (200, 430):
            nodes.send(cc.BEAT, "chief-0", steps=steps)
        peer_gone_then_hold(nodes)

    def resumes_at_400(nodes: FakeNodes) -> None:
        nodes.state.joined("chief-0", kept=True)  # as `generations` records a rejoining node job's tasks
        nodes.state.joined("worker-1", kept=False)
        nodes.register("chief-0", "worker-1")
        nodes.send(cc.FIRST_STEP, "chief-0", resumed_at=400)
        nodes.finish()

    watch = Watch(log=(lines := []).append)
    finished = run_attempts(FakeLauncher(steps_then_peer_gone, resumes_at_400), max_attempts=3, attempt=attempts(MWM),
                            watch=watch)
    assert finished.number == 2
    [recovery] = watch.recoveries
    assert {k: v for k, v in recovery.items() if k not in ("seconds_without_steps", "resumed_time")} == {
        "attempt": 2, "failed_at_steps": 430, "resumed_at_steps": 400, "trained_again": 30,
        "nodes_kept": ["chief-0"], "nodes_restarted": ["worker-1"], "cause": "failure", "workers": 2}
    assert 0 <= recovery["seconds_without_steps"] < 60
    assert lines[0].startswith("attempt 1 of 3 failed after 430 steps: TF node worker-1 failed")
    assert lines[1].startswith("attempt 2 resumed at step 400 of the 430 done before the failure (30 trained again); "
                               "no step was trained for ")
    assert lines[1].endswith(" s; chief-0 kept its task and inputs, worker-1 started on a new task")


def test_an_attempt_that_never_trained_costs_no_recovery_of_its_own():
    def fails_before_a_step(nodes: FakeNodes) -> None:
        peer_gone_then_hold(nodes)

    watch = Watch(log=(lines := []).append)
    run_attempts(FakeLauncher(fails_before_a_step, trains_well), max_attempts=3, attempt=attempts(MWM), watch=watch)
    assert watch.recoveries == [] and lines[0].startswith("attempt 1 of 3 failed: ")


def test_a_kept_node_job_outlives_its_failed_attempt_and_the_launcher_ends_it_after_the_last():
    first_running: list[bool] = []

    def second(nodes: FakeNodes) -> None:
        first_running.append(not launcher.launched[0].cancelled.is_set())
        trains_well(nodes)

    launcher = FakeLauncher(peer_gone_then_hold, second, keep=True)
    finished, _ = run(launcher)
    first = launcher.launched[0]
    assert finished.number == 2 and first.state.done() == cc.RUN_FAILED  # its nodes heard the attempt ended
    assert first_running == [True]  # not cancelled while the next attempt ran
    assert first.cancelled.is_set() and launcher.closed == 1  # by `close`, once, after the last attempt
    with pytest.raises(TrainingError):
        run(FakeLauncher(peer_gone_then_hold, peer_gone_then_hold, keep=True), max_attempts=2)


def test_a_code_error_fails_the_job_without_a_relaunch():
    def code_error(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-1")
        nodes.send(cc.FAILED, "chief-0", text=CODE_ERROR)
        nodes.hold()

    launcher = FakeLauncher(code_error, trains_well)
    with pytest.raises(TrainingError, match=r"TF node chief-0 failed: ValueError: shapes \(3,\) and \(4,\)") as e:
        run(launcher)
    assert not e.value.retriable and len(launcher.launched) == 1


def test_the_last_attempts_failure_is_raised():
    launcher = FakeLauncher(peer_gone_then_hold, peer_gone_then_hold)
    lines: list[str] = []
    with pytest.raises(TrainingError, match="worker-1 failed: .*UnavailableError") as e:
        run_attempts(launcher, max_attempts=2, attempt=attempts(MWM), watch=Watch(log=lines.append))
    assert e.value.retriable and len(launcher.launched) == 2
    assert [line.split(":")[0] for line in lines] == ["attempt 1 of 2 failed"]


def test_nodes_that_do_not_all_start_in_time_fail_the_attempt():
    def one_of_two(nodes: FakeNodes) -> None:
        nodes.register("chief-0")
        nodes.hold()

    tr = TrainConfig(strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2, reservation_timeout=1)
    launcher = FakeLauncher(one_of_two)
    with pytest.raises(TrainingError, match=r"only 1 of 2 TF nodes started within train.reservation_timeout = 1 s"):
        run(launcher, tr, max_attempts=1)
    assert launcher.launched[0].cancelled.is_set()


def test_a_run_with_no_finished_step_for_step_timeout_is_a_hang_and_relaunched():
    def hangs(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-1")
        nodes.hold()

    tr = TrainConfig(strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2, step_timeout=1)
    launcher = FakeLauncher(hangs, trains_well)
    finished, lines = run(launcher, tr)
    assert finished.number == 2
    assert lines[0].startswith("attempt 1 of 3 failed: no training step finished in the last ")
    assert "(train.step_timeout = 1 s): a TF node hangs" in lines[0]


def test_a_node_that_could_not_report_is_named_from_its_task_error():
    def executor_lost(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-1")
        nodes.task_errors["worker-1"] = "ExecutorLostFailure (executor 1 exited caused by one of the running tasks)"
        nodes.task_failures = 1
        nodes.hold()

    launcher = FakeLauncher(executor_lost, trains_well)
    finished, lines = run(launcher)
    assert finished.number == 2
    assert lines[0].startswith("attempt 1 of 3 failed: TF node worker-1 failed: ExecutorLostFailure (executor 1")


def test_a_lost_parameter_server_worker_is_tolerated_and_training_goes_on():
    def worker_lost(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-0", "worker-1", "ps-0")
        nodes.task_failures = 1
        nodes.send(cc.LOST, "worker-1")
        nodes.send(cc.BEAT, "chief-0", steps=10)
        assert not nodes.cancelled.wait(2)  # the supervisor keeps the run going
        nodes.finish()

    finished, lines = run(FakeLauncher(worker_lost), PS)
    assert finished.number == 1 and finished.state.lost() == ["worker-1"]
    assert lines == ["TF node worker-1 was lost with its executor; training goes on with 1 worker(s)"]


def test_a_lost_parameter_server_workers_retry_learns_its_place_and_is_counted_back_once_started():
    record = {"partition": 2, "host": "h", "pid": 1, "python": "py", "cuda_visible_devices": "", "started": 0.0,
              "role": "worker", "index": 1, "executor_id": 2, "threads": 1,
              "cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]}}
    lines: list[str] = []
    state = RunState("r", 4, progress=None, transfers=None)
    lost = LostWorkers(PS, state, lines.append)
    state.handle(cc.STARTED, {cc.SENDER_NODE: "worker-1", "record": record})
    assert state.handle(cc.PLACE, {cc.SENDER_NODE: "worker-1"}) is None  # not lost: its place is its own
    state.handle(cc.LOST, {cc.SENDER_NODE: "worker-1"})
    assert state.handle(cc.PLACE, {cc.SENDER_NODE: "worker-1"}) == {
        "cluster": record["cluster"], "role": "worker", "index": 1}
    assert lost.tolerated(1) and state.replaced() == []
    state.handle(cc.STARTED, {cc.SENDER_NODE: "worker-1", "record": {**record, "pid": 2}})
    assert lost.tolerated(1) and state.replaced() == ["worker-1"] and state.records()["worker-1"]["pid"] == 2
    assert lines == ["TF node worker-1 was lost with its executor; training goes on with 1 worker(s)",
                     "TF node worker-1 is back: a new task took its place in the TF cluster; the chief's coordinator "
                     "gives it steps again once it has rebuilt its dataset there"]
    state.mark_done(cc.RUN_OK)
    assert state.handle(cc.PLACE, {cc.SENDER_NODE: "worker-1"}) is None  # the run is over


def test_stop_ends_the_attempt_and_is_not_relaunched():
    stop = threading.Event()

    def trains_until_stopped(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-1")
        nodes.send(cc.BEAT, "chief-0", steps=10)
        stop.set()
        nodes.hold()

    launcher = FakeLauncher(trains_until_stopped, trains_well)
    with pytest.raises(TrainingError, match="stopped before the end .*running it again resumes") as e:
        run(launcher, stop=stop)
    assert not e.value.retriable and len(launcher.launched) == 1 and launcher.launched[0].cancelled.is_set()


def test_lost_parameter_server_workers_are_tolerated_until_none_is_left():
    lines: list[str] = []
    state = RunState("r", 4, progress=None, transfers=None)
    lost = LostWorkers(TrainConfig(strategy="parameter_server", workers=2, reservation_timeout=0), state, lines.append)
    assert not lost.tolerated(1)  # a failed task, no worker reported lost, no time left to wait
    state.handle(cc.LOST, {cc.SENDER_NODE: "worker-1"})
    assert lost.tolerated(1) and lines == ["TF node worker-1 was lost with its executor; training goes on with 1 worker(s)"]
    assert not lost.tolerated(2)  # a second failure that is not a lost worker (e.g. the ps)
    state.handle(cc.LOST, {cc.SENDER_NODE: "worker-0"})
    with pytest.raises(TrainingError, match=r"all 2 parameter-server workers were lost .*worker-0, worker-1"):
        lost.tolerated(2)
    mwms = LostWorkers(TrainConfig(strategy="multi_worker_mirrored", workers=2), state, lines.append)
    assert not mwms.tolerated(1)


ELASTIC = TrainConfig(strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2, batch_size=512, reservation_timeout=30,
                      step_timeout=30, elastic=ElasticConfig(wait_seconds=1, min_workers=1))


def test_an_elastic_run_goes_on_with_the_survivors_when_a_lost_executor_does_not_come_back():
    def steps_then_worker_lost(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-1")
        nodes.send(cc.FIRST_STEP, "chief-0", resumed_at=0)
        nodes.send(cc.BEAT, "chief-0", steps=300)
        nodes.cluster.executors = 1  # worker-1's executor is gone for good
        peer_gone_then_hold(nodes)

    def only_the_survivor_starts(nodes: FakeNodes) -> None:
        nodes.register("chief-0")
        nodes.hold()

    def survivor_alone(nodes: FakeNodes) -> None:
        nodes.register("chief-0")
        nodes.send(cc.FIRST_STEP, "chief-0", resumed_at=200)
        nodes.finish()

    launcher = FakeLauncher(steps_then_worker_lost, only_the_survivor_starts, survivor_alone)
    watch = Watch(log=(lines := []).append)
    finished = run_attempts(launcher, max_attempts=2, attempt=attempts(ELASTIC), watch=watch)
    assert finished.number == 3 and launcher.sizes == [2, 2, 1]
    assert (finished.train.workers, finished.train.batch_size) == (1, 1024)  # the global batch kept
    assert lines[0].startswith("attempt 1 of 2 failed after 300 steps: TF node worker-1 failed")
    assert lines[1] == ("only 1 of 2 TF nodes started within train.elastic.wait_seconds = 1 s, and 1 executor is "
                        "registered: the run goes on with fewer workers\nrelaunching the TF cluster with 1 worker; "
                        "training resumes from the last checkpoint")
    assert launcher.launched[1].cancelled.is_set()  # the survivor's task of the waiting attempt was ended
    [recovery] = watch.recoveries
    assert (recovery["attempt"], recovery["cause"], recovery["workers"]) == (3, "shrink", 1)
    assert (recovery["failed_at_steps"], recovery["resumed_at_steps"], recovery["trained_again"]) == (300, 200, 100)
    assert lines[2].startswith("attempt 3 with 1 worker resumed at step 200 of the 300 done before the failure")
    # a shrink is not a failure: attempt 1's failure was the first of the two allowed


def test_an_elastic_run_below_its_workers_grows_after_the_next_checkpoint_once_executors_join(monkeypatch):
    monkeypatch.setattr(supervise_mod, "GROW_POLL", 0.1)

    def one_executor(nodes: FakeNodes) -> None:
        nodes.register("chief-0")
        nodes.hold()

    def trains_alone_then_an_executor_joins(nodes: FakeNodes) -> None:
        nodes.register("chief-0")
        nodes.send(cc.FIRST_STEP, "chief-0", resumed_at=0)
        nodes.send(cc.BEAT, "chief-0", steps=400)
        nodes.cluster.executors = 2
        assert nodes.cluster.more_counted.wait(30), "the supervisor never counted the executors"
        assert not nodes.cancelled.wait(0.5)  # no growth before a checkpoint
        nodes.send(cc.PUBLISH, "chief-0", target=cc.BACKUP, files={})  # the checkpoint at step 500
        nodes.send(cc.BEAT, "chief-0", steps=520)
        nodes.hold()

    def grown(nodes: FakeNodes) -> None:
        nodes.register("chief-0", "worker-1")
        nodes.send(cc.FIRST_STEP, "chief-0", resumed_at=500)
        nodes.finish()

    launcher = FakeLauncher(one_executor, trains_alone_then_an_executor_joins, grown, executors=1)
    watch = Watch(log=(lines := []).append)
    finished = run_attempts(launcher, max_attempts=1, attempt=attempts(ELASTIC), watch=watch)
    assert finished.number == 3 and launcher.sizes == [2, 1, 2]
    assert (finished.train.workers, finished.train.batch_size) == (2, 512)
    assert lines[1] == ("1 more executor registered during attempt 2, which ran 1 of train.workers = 2: the run grows "
                        "to 2 after its last checkpoint\nrelaunching the TF cluster with 2 workers; training resumes "
                        "from the last checkpoint")
    [recovery] = watch.recoveries
    assert (recovery["attempt"], recovery["cause"], recovery["workers"]) == (3, "grow", 2)
    assert (recovery["resumed_at_steps"], recovery["trained_again"]) == (500, 20)


def test_an_elastic_run_waits_on_while_fewer_executors_than_min_workers_are_registered():
    def one_of_two(nodes: FakeNodes) -> None:
        nodes.register("chief-0")
        nodes.hold()

    tr = TrainConfig(strategy=Strategy.MULTI_WORKER_MIRRORED.value, workers=2, reservation_timeout=2,
                     elastic=ElasticConfig(wait_seconds=1, min_workers=2))
    launcher = FakeLauncher(one_of_two, executors=1)
    with pytest.raises(TrainingError, match=r"only 1 of 2 TF nodes started within train.reservation_timeout = 2 s"):
        run(launcher, tr, max_attempts=1)
    assert launcher.sizes == [2]


def test_elastic_settings_are_checked_before_the_run():
    from tfos_jobs.features.spec import FeatureSpec

    def errors(**kw) -> list[str]:
        tr = TrainConfig(**{"strategy": Strategy.MULTI_WORKER_MIRRORED.value, "workers": 2, **kw})
        return [e for e in tr.errors(FeatureSpec(())) if e.startswith("train.elastic")]

    assert errors(elastic=ElasticConfig(wait_seconds=30)) == []
    assert errors(elastic=ElasticConfig(wait_seconds=-1)) == [
        "train.elastic.wait_seconds: must be >= 0 (0 = off), got -1"]
    assert errors(elastic=ElasticConfig(wait_seconds=30, min_workers=3)) == [
        "train.elastic.min_workers: must be between 1 and train.workers (2), got 3"]
    assert errors(strategy=Strategy.PARAMETER_SERVER.value, elastic=ElasticConfig(wait_seconds=30)) == [
        "train.elastic.wait_seconds: elastic training needs strategy = \"multi_worker_mirrored\" (a parameter-server "
        "run goes on without a lost worker as it is), got 'parameter_server'"]
    per_worker = TrainConfig(workers=3, batch_size=100, elastic=ElasticConfig(wait_seconds=5, batch="per_worker"))
    assert (per_worker.resized(2).workers, per_worker.resized(2).batch_size) == (2, 100)
    assert TrainConfig(workers=3, batch_size=100, elastic=ElasticConfig(wait_seconds=5)).resized(2).batch_size == 150
