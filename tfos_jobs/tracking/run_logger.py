"""MLflow runs logged from the driver, beside the work and never in its way.

Every call is queued and sent by one background thread, in order, so training never waits on the tracking server. A
server that cannot be reached (or any call that fails) gives one warning and the rest of the logging is dropped: the job
goes on and its own files are complete anyway. The end of a job waits for what is queued, at most
`tracking.wait_seconds`."""
from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable, Mapping

from tfos_jobs.config.tracking import TrackingConfig
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.tracking.params import redact

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag that nests a run under another
STATUS_TAG = "tfos.status"  # how a run ended in tfos terms (a sweep trial: completed, pruned, failed)
PARAM_BATCH, METRIC_BATCH = 100, 1000  # MLflow's limits per log_batch call
PROBE_SECONDS = 5


def quiet_mlflow() -> None:
    """MLflow's own chatter (progress bars, run links, waits) stays out of the job's output; its warnings still show."""
    import logging

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.getLogger("mlflow").setLevel(logging.WARNING)


class Tracking:
    """One connection to a tracking server or store, and the thread that talks to it."""

    def __init__(self, settings: TrackingConfig, log: Callable[[str], None] = print):
        # MLflow retries an unreachable server for minutes by default; a job would wait that long at its end.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        quiet_mlflow()
        self.settings, self.log = settings, log
        self.where = redact(settings.uri)
        self.client: Any = None
        self.experiment_id: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._failed = threading.Event()
        self._thread = threading.Thread(target=self._work, name="tfos-tracking", daemon=True)
        self._thread.start()
        self.submit(self._connect)

    def submit(self, call: Callable[[], None]) -> None:
        if not self._failed.is_set():
            self._queue.put(call)

    def start_run(self, name: str, tags: Mapping[str, str] | None = None, parent: "TrackedRun | None" = None
                  ) -> "TrackedRun":
        run = TrackedRun(self)

        def create() -> None:
            all_tags = dict(tags or {})
            if parent is not None and parent.id:
                all_tags[PARENT_TAG] = parent.id
            run.id = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags).info.run_id
            run.artifact_uri = self.client.get_run(run.id).info.artifact_uri

        self.submit(create)
        return run

    def wait(self) -> bool:
        """Block until everything queued is sent, at most `wait_seconds`; False if it was not."""
        done = _Flushed()
        self._queue.put(done)
        if done.wait(self.settings.wait_seconds):
            return not self._failed.is_set()
        self.log(f"warning: tracking: {self.where} did not take everything within tracking.wait_seconds = "
                 f"{self.settings.wait_seconds:g}; the rest is not logged")
        self._failed.set()
        return False

    def _connect(self) -> None:
        if self.settings.uri.startswith(("http://", "https://")):
            import requests

            requests.get(f"{self.settings.uri.rstrip('/')}/health", timeout=PROBE_SECONDS).raise_for_status()
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=self.settings.uri, registry_uri=self.settings.uri)
        experiment = self.client.get_experiment_by_name(self.settings.experiment)
        if experiment is None:
            try:
                self.experiment_id = self.client.create_experiment(self.settings.experiment)
            except Exception:  # another job created it meanwhile
                experiment = self.client.get_experiment_by_name(self.settings.experiment)
                if experiment is None:
                    raise
        if experiment is not None:
            self.experiment_id = experiment.experiment_id

    def _work(self) -> None:
        while True:
            call = self._queue.get()
            if isinstance(call, _Flushed):  # set even after a failure: `wait` must not sit out its time
                call.set()
                continue
            if self._failed.is_set():
                continue
            try:
                call()
            except Exception as e:  # the job goes on; its own files hold everything
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                self.log(f"warning: tracking: {self.where} failed ({type(e).__name__}: {redact(first)[:300]}); "
                         "the job goes on without logging to it")
                self._failed.set()


class _Flushed(threading.Event):
    """Queued by `Tracking.wait`: set when everything queued before it has been handled."""


class TrackedRun:
    """One MLflow run; every method queues its call (the run's id is known once it is created). MLflow is imported by
    the tracking thread only: two threads importing it at once can deadlock on its modules' import locks."""

    def __init__(self, tracking: Tracking):
        self.tracking = tracking
        self.id: str | None = None
        self.artifact_uri: str | None = None

    def params(self, values: Mapping[str, str]) -> None:
        items = list(values.items())
        for i in range(0, len(items), PARAM_BATCH):
            def send(chunk: list[tuple[str, str]] = items[i:i + PARAM_BATCH]) -> None:
                from mlflow.entities import Param

                self.tracking.client.log_batch(self.id, params=[Param(k, v) for k, v in chunk])

            self.tracking.submit(send)

    def metrics(self, values: Mapping[str, float], step: int = 0) -> None:
        now = int(time.time() * 1000)
        items = [(k, float(v)) for k, v in values.items() if isinstance(v, (int, float))]
        for i in range(0, len(items), METRIC_BATCH):
            def send(chunk: list[tuple[str, float]] = items[i:i + METRIC_BATCH]) -> None:
                from mlflow.entities import Metric

                self.tracking.client.log_batch(self.id, metrics=[Metric(k, v, now, step) for k, v in chunk])

            self.tracking.submit(send)

    def epoch(self, line: EpochLine) -> None:
        """One epoch line: the model's metrics and the epoch's speed, at step = the epoch."""
        self.metrics({**line.metrics, "examples_per_sec": line.examples_per_sec, "epoch_seconds": line.seconds},
                     step=line.epoch)

    def tags(self, values: Mapping[str, str]) -> None:
        for key, value in values.items():
            def send(key: str = key, value: str = value) -> None:
                self.tracking.client.set_tag(self.id, key, value)

            self.tracking.submit(send)

    def artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """A local file or directory; it must stay until `Tracking.wait` returns."""
        def send() -> None:
            if os.path.isdir(local_path):
                self.tracking.client.log_artifacts(self.id, local_path, artifact_path)
            else:
                self.tracking.client.log_artifact(self.id, local_path, artifact_path)

        self.tracking.submit(send)

    def call(self, fn: Callable[["TrackedRun"], None]) -> None:
        """Anything else, in order with the rest (a model's logging and registration)."""
        self.tracking.submit(lambda: fn(self))

    def end(self, status: str = "FINISHED") -> None:
        """FINISHED, FAILED or KILLED."""
        self.tracking.submit(lambda: self.tracking.client.set_terminated(self.id, status=status))
