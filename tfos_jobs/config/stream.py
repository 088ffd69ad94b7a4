"""`[stream]`: `tfos stream`, scoring a Kafka topic with the prediction function as events arrive."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

# Kafka settings the job sets itself: given in `stream.kafka`, they would be overridden or break it.
OWN_KAFKA_OPTIONS = ("bootstrap.servers", "key.deserializer", "value.deserializer", "key.serializer",
                     "value.serializer", "enable.auto.commit", "auto.offset.reset", "group.id")


@dataclass(frozen=True)
class StreamConfig:
    """Events (JSON objects, one per Kafka record) on `topic` are parsed by the feature spec's types (`schema`: their
    columns as DDL; default: the columns of `prepare.main`, as its rows would come), joined like `tfos predict` joins
    them (rows), or cut into windows per asset (sensor readings), then scored with the model in `model` (default
    `predict.model`; a new version there is picked up between micro-batches).

    Scored rows go to Parquet at `output` (exactly once per micro-batch, resumed from `checkpoint` after a stop), and to
    the Kafka topic `output_topic` when set (at least once, keyed). Events that cannot be scored go to `quarantine` with
    the reason. `kafka` holds more client settings without their `kafka.` prefix (e.g. `security.protocol`)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "tfos-events"
    starting_offsets: Literal["earliest", "latest"] = "earliest"  # where a new checkpoint starts reading
    kafka: Mapping[str, str] = field(default_factory=dict)
    schema: str = ""
    model: str = ""
    output: str = "demo-output/stream/scores"
    quarantine: str = "demo-output/stream/quarantine"
    checkpoint: str = "demo-output/stream/checkpoint"
    output_topic: str = ""
    progress_log: str = "demo-output/stream/micro_batches.jsonl"  # one JSON line per micro-batch, on the driver's disk
    watermark_seconds: int = 600  # how far behind the latest event time a sensor reading may still arrive
    trigger_seconds: float = 2.0  # a micro-batch at most this often
    # events per micro-batch at most: a backlog (a restart, a replay) is drained in bounded
    # micro-batches; 0: all that are there, in one
    max_offsets_per_trigger: int = 50_000
    alerts: int = 20  # anomaly alerts printed per micro-batch at most (all are in the output)
    stop_when_idle_seconds: float = 0.0  # > 0: stop once no event arrived for this long (replays, tests)
    # micro_batch: micro-batches every trigger_seconds, to Parquet (and output_topic); real_time: Spark's real-time
    # trigger, each event scored in the executor JVM as it arrives and sent to output_topic (rows, not sensor windows)
    mode: Literal["micro_batch", "real_time"] = "micro_batch"
    real_time_batch_seconds: float = 60.0  # real_time: how long each of its batches runs (its checkpoint interval)

    def errors(self) -> list[str]:
        errs = []
        if not self.bootstrap_servers.strip():
            errs.append("stream.bootstrap_servers: must not be empty (host:port of a Kafka broker)")
        if not self.topic.strip():
            errs.append("stream.topic: must not be empty")
        for key in ("output", "quarantine", "checkpoint"):
            if not getattr(self, key).strip():
                errs.append(f"stream.{key}: must not be empty")
        paths = [self.output.rstrip("/"), self.quarantine.rstrip("/"), self.checkpoint.rstrip("/")]
        if len(set(paths)) < len(paths):
            errs.append("stream.output, stream.quarantine and stream.checkpoint: must be three different places")
        own = sorted(k for k in self.kafka if k.removeprefix("kafka.") in OWN_KAFKA_OPTIONS)
        if own:
            errs.append(f"stream.kafka: {', '.join(own)} set by the job itself (use stream.bootstrap_servers, "
                        "stream.starting_offsets)")
        if self.output_topic and self.output_topic == self.topic:
            errs.append(f"stream.output_topic: {self.output_topic!r} is the input topic")
        if self.watermark_seconds < 0:
            errs.append(f"stream.watermark_seconds: must be >= 0, got {self.watermark_seconds}")
        if self.trigger_seconds <= 0:
            errs.append(f"stream.trigger_seconds: must be > 0, got {self.trigger_seconds}")
        if self.max_offsets_per_trigger < 0:
            errs.append(f"stream.max_offsets_per_trigger: must be >= 0 (0: no limit), got {self.max_offsets_per_trigger}")
        if self.alerts < 0:
            errs.append(f"stream.alerts: must be >= 0, got {self.alerts}")
        if self.mode == "real_time" and not self.output_topic:
            errs.append("stream.output_topic: real_time mode sends its scores to Kafka; name the output topic")
        if self.mode == "real_time" and self.stop_when_idle_seconds:
            errs.append("stream.stop_when_idle_seconds: real_time mode runs until stopped (SIGINT, SIGTERM)")
        if self.real_time_batch_seconds <= 0:
            errs.append(f"stream.real_time_batch_seconds: must be > 0, got {self.real_time_batch_seconds}")
        if self.stop_when_idle_seconds < 0:
            errs.append(f"stream.stop_when_idle_seconds: must be >= 0 (0: run until stopped), got "
                        f"{self.stop_when_idle_seconds}")
        return errs
