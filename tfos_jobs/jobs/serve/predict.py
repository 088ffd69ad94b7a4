"""`tfos predict` (driver side): input rows + prediction columns, rows out = rows in
(`serving.scoring` reads and scores them, `serving.outputs` writes them)."""
from __future__ import annotations

import time
from typing import Callable

from pyspark.sql import Observation, SparkSession

from tfos_jobs.config import Config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.prediction import PredictionSummary, summary_file
from tfos_jobs.errors import ConfigError
from tfos_jobs.serving import outputs as output
from tfos_jobs.serving.error_lines import query_errors
from tfos_jobs.serving.scoring import input_table, with_predictions
from tfos_jobs.tracking.registry import resolver
from udfs import register


def run(spark: SparkSession, config: Config, *, overwrite: bool = False,
        log: Callable[[str], None] = print) -> PredictionSummary:
    """Score and write. `overwrite` (the --overwrite flag) turns predict.mode "create" into "overwrite"."""
    pr = config.predict
    mode = "overwrite" if overwrite and pr.mode == "create" else pr.mode
    started = time.time()
    udf = register(spark, pr.name, pr.model, batch_size=pr.batch_size, engine=pr.engine, setting="predict.model",
                   resolve=resolver(config.tracking.uri or None))
    table = input_table(spark, config, udf.spec)
    missing = [c for c in pr.partition_by if c not in table.columns]
    if missing:
        raise ConfigError(f"predict.partition_by: {', '.join(map(repr, missing))} not among the input's columns "
                          f"({', '.join(table.columns)})")
    counted: list[Observation] = []  # the counters of this query, as it scores (any session: observed metrics)
    with query_errors():  # a query error, or one in its tasks, as one line
        written = output.selected(with_predictions(table, udf, counted), table.columns, udf.spec, pr.keep,
                                  pr.partition_by)
    scored = output.Tally(written, pr.partition_by)
    out: output.Database | output.CatalogTable | output.Files
    if pr.output_source:
        out = output.Database(spark, pr.output_source, config.sources[pr.output_source])
    elif pr.output_table:
        out = output.CatalogTable(spark, pr.output_table, pr.partition_by)
    else:
        out = output.Files(spark, pr.output, pr.partition_by)
    with query_errors():
        rows_out = out.write(scored, mode)
    summary = PredictionSummary(output=out.target, mode=mode, rows=rows_out, model=udf.export_dir,
                                counts=udf.counts_of(counted[0]), seconds=round(time.time() - started, 1))
    log(f"predicted {rows_out:,} rows into {out.target} ({mode}) in {summary.seconds} s")
    served = {k: v for k, v in summary.counts.items() if k != contract.COUNT_ROWS}
    if served:
        log("  filled nulls / unseen categories: " + ", ".join(f"{k} {v:,}" for k, v in served.items()))
    if isinstance(out, output.Files):
        out.fs.write_text(summary_file(out.target), summary.to_json())
    return summary
