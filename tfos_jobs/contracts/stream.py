"""What `tfos stream` writes: the columns of its outputs, the layout of its file sinks, why an
event is quarantined, and its progress lines. The job writes them; readers (users, the tests,
the bench) import the names from here.

    <output>/micro_batch=<id>/part-*.parquet       the scored rows or windows of micro-batch <id>
    <quarantine>/micro_batch=<id>/part-*.parquet   the events and windows not scored, with why
    <output>/_staging/...                          a micro-batch being written (moved into place
                                                   whole: its directory appears once, or not at all)
    <output>/_reports/micro_batch=<id>.json        what micro-batch <id> did (`BatchReport`'s fields):
                                                   where the stream's watcher reads it, in the
                                                   client's process, wherever the micro-batch ran

A micro-batch's directory is its commit: a micro-batch run again after a restart (Spark replays
it from the checkpoint) finds its directory and writes nothing twice.
"""
from __future__ import annotations

from tfos_jobs.names import Name

MICRO_BATCH = "micro_batch"  # the partition column of both file sinks
STAGING = "_staging"  # hidden from Spark's readers by its leading underscore
REPORTS = "_reports"

# Columns of the scored output, besides the key, the window bounds (or the row's kept columns)
# and the prediction fields (`contracts.serving.UDF_FIELDS`).
MODEL_VERSION = "model_version"  # the version of the model that scored the row (`udfs.register`)
EVENT_TIMESTAMP = "kafka_timestamp"  # the event's Kafka timestamp; a window's: its last reading to arrive
SCORED_AT = "scored_at"  # when its micro-batch was scored (the driver's clock)

# Columns of the quarantine: why, in words naming the column, and the event as it came.
REASON = "reason"
DETAIL = "detail"
RAW = "raw"  # the event's Kafka value as text
READING_TIME = "reading_time"  # a sensor reading's own time (late and duplicate readings)


class Reason(Name):
    MALFORMED = "malformed"  # not JSON, or a value of the wrong type
    MISSING_KEY = "missing_key"
    MISSING_TIME = "missing_time"
    LATE = "late"  # a reading for a window already emitted
    DUPLICATE = "duplicate"  # a second reading of an asset on the same step
    # A window left out carries the reason batch preparation gives it (`data.windows.DROP_REASONS`).


# One JSON object per micro-batch in the progress log (`stream.progress_log`), and the console line.
BATCH = "batch"
STARTED = "timestamp"  # when the micro-batch started (ISO 8601, UTC), as Spark's progress says
INPUT_ROWS = "input_rows"
INPUT_ROWS_PER_SECOND = "input_rows_per_second"
PROCESSED_ROWS_PER_SECOND = "processed_rows_per_second"
BATCH_MS = "batch_ms"
STATE_ROWS = "state_rows"
SCORED = "scored"
QUARANTINED = "quarantined"
QUARANTINED_BY_REASON = "quarantined_by_reason"
ALERTS = "alerts"
COUNTS = "counts"  # the prediction function's counters (`contracts.serving`: rows, nulls filled, cut, unseen)
WATERMARK = "watermark"
SKIPPED = "skipped"  # the micro-batch was written before a restart: nothing written again


def batch_dir(root: str, batch: int) -> str:
    return f"{root.rstrip('/')}/{MICRO_BATCH}={batch}"


def staging_dir(root: str, batch: int) -> str:
    return f"{root.rstrip('/')}/{STAGING}/{MICRO_BATCH}={batch}"


def report_file(root: str, batch: int) -> str:
    return f"{root.rstrip('/')}/{REPORTS}/{MICRO_BATCH}={batch}.json"


# The Kafka key of a scored row in `stream.output_topic`: its key, and for a window the key, this
# separator and the window's start (epoch seconds). A micro-batch sent again after a restart sends
# the same keys: a consumer keeps the last value of each (or the topic is compacted).
KEY_SEPARATOR = "@"
