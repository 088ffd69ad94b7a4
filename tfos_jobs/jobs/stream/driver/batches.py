"""One micro-batch of `tfos stream` (Spark's `foreachBatch`, on the driver): score its rows with
the model's current version, write them and the quarantined events, print the alerts.

Exactly once to the files: a micro-batch's rows are written to a staging directory, counted, sent to the output topic
(when there is one), then moved into place as the micro-batch's own directory (`contracts.stream.batch_dir`); a
micro-batch that Spark runs again after a restart finds its directory and writes nothing twice. At least once to Kafka:
a micro-batch stopped between sending and moving is sent again, with the same keys (`contracts.stream.KEY_SEPARATOR`).

The model is looked up before each micro-batch that has rows to score (`ModelSlot`): a new
export in its directory, or an alias moved to another version, is registered and used from that
micro-batch on, and every row records the version that scored it.

What a micro-batch did (`BatchReport`, its alerts and model swaps among its messages) is written
beside its rows (`contracts.stream.report_file`), where the stream's watcher reads it: from a
Spark Connect client, `foreachBatch` runs in a Python process of the server's, so this object
travels there pickled, and nothing it holds may be tied to the client's process.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from tfos_jobs import sessions
from tfos_jobs.config import Config
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.data.columns import DROP_REASON
from tfos_jobs.data.windows import DROP_REASONS
from tfos_jobs.errors import TfosError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START, FeatureSpec
from tfos_jobs.serving import outputs as prediction_output
from tfos_jobs.serving.scoring import with_predictions
from tfos_jobs.storage import Storage
from tfos_jobs.tracking.registry import resolver
from udfs import PredictionUdf, register
from udfs.model_location import served_spec, served_version
from udfs.registration import register_in

SETTING = "stream.model"
SCORABLE = "_scorable"  # the count of rows to score, beside the quarantine's reasons


class ModelSlot:
    """The prediction function of the model the stream scores with, registered again when the
    model's version changes. A version that cannot be read (an export half written) or that
    takes other inputs leaves the current one in place, said once.

    A streaming query runs in a copy of the session, made when it starts: a function registered
    in the session afterwards is not seen by the micro-batches' queries. So the function is
    registered in the session each micro-batch runs in (`current`)."""

    def __init__(self, spark: SparkSession, config: Config):
        self.model = config.stream.model or config.predict.model
        self.name, self.batch_size = config.predict.name, config.predict.batch_size
        self.engine = config.predict.engine
        self.resolve = resolver(config.tracking.uri or None)
        self.udf = self._register(spark)
        self.session = sessions.session_id(spark)  # the session `udf` is registered in
        self._refused: str | None = None

    def _register(self, spark: SparkSession) -> PredictionUdf:
        return register(spark, self.name, self.model, batch_size=self.batch_size, engine=self.engine, setting=SETTING,
                        resolve=self.resolve)

    def current(self, batch: int, spark: SparkSession, note: Callable[[str], None]) -> PredictionUdf:
        """The function to score micro-batch `batch` with, registered in its session `spark`;
        `note` takes what the micro-batch's report says of the model."""
        try:
            version = served_version(spark, self.model, setting=SETTING, resolve=self.resolve)
            if version not in (self.udf.version, self._refused):
                problem = incompatible(self.udf.spec, served_spec(spark, self.model, setting=SETTING, resolve=self.resolve))
                if not problem:
                    candidate = self._register(spark)
                    note(f"model: {self.udf.version} -> {candidate.version} ({candidate.export_dir}) "
                         f"from micro-batch {batch}")
                    self.udf, self.session = candidate, sessions.session_id(spark)
                    return candidate
                self._refused = version
                note(f"model: not swapping to {version}: {problem}; keeping {self.udf.version}")
        except TfosError as e:
            note(f"model: keeping {self.udf.version}: {self.model!r} cannot be read now ({e})")
        if sessions.session_id(spark) != self.session:
            self.udf, self.session = register_in(spark, self.udf), sessions.session_id(spark)
        return self.udf


def incompatible(current: FeatureSpec, candidate: FeatureSpec) -> str:
    """Why the stream cannot score with a model of `candidate`'s spec (empty: it can)."""
    if candidate.model_inputs != current.model_inputs:
        return f"it takes {list(candidate.model_inputs)}, the stream gives {list(current.model_inputs)}"
    if current.is_sequence and candidate.time != current.time:
        return f"its windows ({candidate.time}) are not the stream's ({current.time})"
    return ""


@dataclass
class BatchReport:
    """What one micro-batch did; `messages`: its lines for the console (alerts, model swaps)."""

    batch: int
    scored: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    alerts: int = 0
    model_version: str = ""
    skipped: bool = False
    messages: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # the prediction function's counters (`contracts.serving`)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "BatchReport":
        return cls(**json.loads(text))


def why_not_scored(df: DataFrame) -> Column:
    """An event's reason, or a window's drop reason: null for what is scored."""
    if DROP_REASON in df.columns:
        return F.coalesce(F.col(contract.REASON), F.col(DROP_REASON))
    return F.col(contract.REASON)


class FileSink:
    """Parquet files, one directory per micro-batch, moved into place whole."""

    def __init__(self, fs: Storage, root: str):
        self.fs, self.root = fs, fs.qualify(root)

    def committed(self, batch: int) -> bool:
        return self.fs.exists(contract.batch_dir(self.root, batch))

    def stage(self, df: DataFrame, batch: int) -> str:
        staging = contract.staging_dir(self.root, batch)
        self.fs.delete(staging)  # what a stopped run of this micro-batch left
        df.write.parquet(staging)
        return staging

    def commit(self, staging: str, batch: int) -> None:
        self.fs.rename(staging, contract.batch_dir(self.root, batch))


class Batches:
    """The `foreachBatch` function; `report(batch)` reads what a micro-batch did."""

    def __init__(self, config: Config, slot: ModelSlot, fs: Storage):
        self.config, self.slot = config, slot
        self.spec = slot.udf.spec
        self.scores = FileSink(fs, config.stream.output)
        self.quarantine = FileSink(fs, config.stream.quarantine)

    def report(self, batch: int) -> BatchReport | None:
        """What micro-batch `batch` did, once it has ended (None before)."""
        path = contract.report_file(self.scores.root, batch)
        return BatchReport.from_json(self.scores.fs.read_text(path)) if self.scores.fs.exists(path) else None

    def __call__(self, df: DataFrame, batch: int) -> None:
        report = BatchReport(batch, model_version=self.slot.udf.version)
        scores_done, quarantine_done = self.scores.committed(batch), self.quarantine.committed(batch)
        if scores_done and quarantine_done:
            report.skipped = True
        elif self.spec.is_sequence:
            # Windows: the stateful step runs once (kept), and an empty micro-batch, as most are
            # once the readings stop, is found out before anything is written.
            df = df.persist()
            try:
                self._write(df, batch, report, scores_done, quarantine_done, self._counts(df))
            finally:
                df.unpersist()
        else:
            self._write(df, batch, report, scores_done, quarantine_done, None)
        self.scores.fs.write_text(contract.report_file(self.scores.root, batch), report.to_json())

    def _write(self, df: DataFrame, batch: int, report: BatchReport, scores_done: bool, quarantine_done: bool,
               counts: dict[str, int] | None) -> None:
        """Score, send and commit the micro-batch's rows, then its quarantine. Without `counts` (rows), they are counted
        while the scored rows are written: one pass over the micro-batch, read again only for a quarantine."""
        reason = why_not_scored(df)
        counted = Observation()
        source, df = df, df if counts is not None else df.observe(counted, *self._count_columns(df))
        if not scores_done and (counts is None or counts[SCORABLE]):
            udf = self.slot.current(batch, df.sparkSession, report.messages.append)
            observed: list[Observation] = []  # the function's counters, as `tfos predict` observes them
            scored = prediction_output.Tally(self._scored(df.where(reason.isNull()), udf, observed))
            staging = self.scores.stage(scored.df, batch)
            report.scored, report.counts = scored.rows, udf.counts_of(observed[0])
            if report.scored:
                report.model_version = udf.version
                if self.config.stream.output_topic or self.spec.is_sequence:  # sent on, or alerted on
                    written = df.sparkSession.read.parquet(staging)
                    if self.config.stream.output_topic:
                        self._send(written)
                    report.alerts = self._alert(written, report.messages.append)
                self.scores.commit(staging, batch)
            else:
                self.scores.fs.delete(staging)
        if counts is None:  # observed by the write above, or (its micro-batch written before a restart) counted now
            counts = self._counts(source) if scores_done else {k: int(v) for k, v in counted.get.items()}
        report.quarantined = {k: v for k, v in counts.items() if v and k != SCORABLE}
        if report.quarantined and not quarantine_done:
            bad = self._quarantined(source.where(reason.isNotNull()))
            self.quarantine.commit(self.quarantine.stage(bad, batch), batch)

    def _count_columns(self, df: DataFrame) -> list[Column]:
        """Rows to score (SCORABLE) and rows set aside per reason: the reasons are known, so one
        aggregation without a shuffle counts them."""
        reason = why_not_scored(df)
        known = [r.value for r in contract.Reason] + (list(DROP_REASONS) if self.spec.is_sequence else [])
        return [F.count_if(reason.isNull()).alias(SCORABLE), *[F.count_if(reason == r).alias(r) for r in known]]

    def _counts(self, df: DataFrame) -> dict[str, int]:
        row = df.agg(*self._count_columns(df)).first()
        assert row is not None  # a global aggregation has one row
        return {k: int(v or 0) for k, v in row.asDict().items()}

    def _scored(self, table: DataFrame, udf: PredictionUdf, observed: list[Observation]) -> DataFrame:
        arrived = F.timestamp_millis(F.col(contract.EVENT_TIMESTAMP)).alias(contract.EVENT_TIMESTAMP)
        tags = [F.lit(udf.version).alias(contract.MODEL_VERSION), arrived,
                F.current_timestamp().alias(contract.SCORED_AT)]
        if self.spec.is_sequence:
            windows = table.select(*[c for c in table.columns if c not in (DROP_REASON, contract.REASON, contract.DETAIL,
                                                                            contract.RAW, contract.READING_TIME)])
            windows = windows.withColumns({WINDOW_START: F.timestamp_seconds(WINDOW_START),
                                           WINDOW_END: F.timestamp_seconds(WINDOW_END)})
            scored = with_predictions(windows, udf, observed)
            fields = [c for c in scored.columns if c != contract.EVENT_TIMESTAMP]
            return scored.select(*fields, *tags)
        scored = with_predictions(table, udf, observed)
        picked = prediction_output.selected(scored, table.columns, self.spec, self.config.predict.keep, ())
        return scored.select(*picked.columns, *tags)

    def _quarantined(self, df: DataFrame) -> DataFrame:
        key = [self.spec.key.name] if self.spec.key is not None else []
        cols: list[Column | str] = [*key, why_not_scored(df).alias(contract.REASON)]
        if self.spec.is_sequence:
            cols += [F.timestamp_seconds(WINDOW_START).alias(WINDOW_START), F.timestamp_seconds(WINDOW_END).alias(WINDOW_END),
                     F.timestamp_seconds(contract.READING_TIME).alias(contract.READING_TIME),
                     F.coalesce(F.col(contract.DETAIL), F.concat(F.lit("window left out: "), F.col(DROP_REASON)))
                     .alias(contract.DETAIL)]
        else:
            cols.append(contract.DETAIL)
        cols += [contract.RAW, F.timestamp_millis(contract.EVENT_TIMESTAMP).alias(contract.EVENT_TIMESTAMP)]
        return df.select(*cols)

    def _send(self, written: DataFrame) -> None:
        st = self.config.stream
        key = F.col(self.spec.key.name).cast("string") if self.spec.key is not None else F.lit(None).cast("string")
        if self.spec.is_sequence:
            key = F.concat(key, F.lit(contract.KEY_SEPARATOR), F.unix_seconds(WINDOW_START).cast("string"))
        out = written.select(key.alias("key"), F.to_json(F.struct(*written.columns)).alias("value"))
        writer = out.write.format("kafka").option("kafka.bootstrap.servers", st.bootstrap_servers) \
            .option("topic", st.output_topic)
        for k, v in st.kafka.items():
            writer = writer.option(f"kafka.{k.removeprefix('kafka.')}", v)
        writer.save()

    def _alert(self, written: DataFrame, note: Callable[[str], None]) -> int:
        """The micro-batch's anomalies, worst first (up to `stream.alerts`), as lines of its report;
        how many there were."""
        if not self.spec.is_sequence:
            return 0
        anomalies = written.where(F.col(serving.IS_ANOMALY))
        shown = anomalies.orderBy(F.desc(serving.RECONSTRUCTION_ERROR)).limit(self.config.stream.alerts).collect() \
            if self.config.stream.alerts else []
        key = self.spec.key.name if self.spec.key is not None else WINDOW_START
        for row in shown:
            note(f"ALERT {row[key]} {row[WINDOW_START]:%Y-%m-%d %H:%M}-{row[WINDOW_END]:%H:%M} "
                     f"{serving.RECONSTRUCTION_ERROR} {row[serving.RECONSTRUCTION_ERROR]:.4g} "
                     f"(model {row[contract.MODEL_VERSION]})")
        total = anomalies.count() if len(shown) == self.config.stream.alerts else len(shown)
        if total > len(shown):
            note(f"  ... and {total - len(shown):,} more anomalous windows in this micro-batch")
        return total
