"""Column names the package adds to the user's tables: one home, read by every reader and job."""
from __future__ import annotations

CORRUPT = "_corrupt_record"  # a text row that does not parse, as Spark's permissive readers keep it
SOURCE_FILE = "_source_file"  # the file a text row came from
REJECT = "_reject_reason"  # why prepare sets a row aside (quarantine)
SPLIT = "split"  # "train" or "eval"

# The activity aggregates prepare derives per key from an events source (prepare.activity);
# a feature spec uses them by these names.
EVENT_COUNT = "event_count"
ACTIVE_DAYS = "active_days"
CTR = "ctr"
DAYS_SINCE_LAST = "days_since_last"
ACTIVITY_COLUMNS = (EVENT_COUNT, ACTIVE_DAYS, CTR, DAYS_SINCE_LAST)

# Sensor windows (sequence features): why prepare left a window out, and an input problem
# found while cutting an asset's series (the job fails naming it).
DROP_REASON = "_drop_reason"
PROBLEM = "_problem"

# The package's own bookkeeping columns: never written into a user's outputs (predictions).
INTERNAL = (CORRUPT, SOURCE_FILE, REJECT, DROP_REASON, PROBLEM)

# A table of known anomaly intervals (the embedded fleet writes one; `tfos evaluate` reads
# any): the key column, then these. `sensor` is optional.
ANOMALY_START = "start"  # first anomalous time
ANOMALY_END = "end"  # last anomalous time, inclusive
ANOMALY_KIND = "kind"
ANOMALY_SENSOR = "sensor"
