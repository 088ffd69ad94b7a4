"""`[predict]`: batch prediction and SQL: which model, under which SQL name, on what input."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Union, get_args

from tfos_jobs.config.sources import SourceConfig, unknown

# where the prediction function scores: "python" (an Arrow UDF in a Python worker), "jvm" (TensorFlow Java inside the
# executor JVM), "auto" (the JVM when it answers a check batch as Python does, else Python, saying why)
Engine = Literal["python", "jvm", "auto"]
ENGINES: tuple[str, ...] = get_args(Engine)


@dataclass(frozen=True)
class PredictConfig:
    model: str = "demo-output/model"
    name: str = "predict"  # the SQL function name
    input: Union[str, None] = None  # a source name; default: the main source joined as in prepare
    output: str = "demo-output/predictions"
    output_table: Union[str, None] = None  # write a catalog (Hive) table instead of Parquet files
    output_source: Union[str, None] = None  # or a database table: the name of a jdbc source
    partition_by: tuple[str, ...] = ()  # columns the output is partitioned by (files and catalog tables)
    # input columns written beside the key(s) and the predictions (partition_by's are kept too)
    keep: tuple[str, ...] = ()
    # create: fail if the output exists; overwrite: replace it; overwrite_partitions: replace only
    # the partitions this run writes; append: add the rows to it.
    mode: Literal["create", "overwrite", "overwrite_partitions", "append"] = "create"
    batch_size: int = 10_000  # rows per call of the model (each function its own, whatever the Arrow batches)
    # where the function scores (ENGINES)
    engine: Engine = "python"

    def errors(self, sources: Mapping[str, SourceConfig]) -> list[str]:
        errs = [] if self.input is None else unknown(sources, "predict.input", self.input)
        if self.output_table and self.output_source:
            errs.append("predict.output_source: give output_table (a catalog table) or output_source (a database), "
                        "not both")
        if self.output_source is not None:
            out = sources.get(self.output_source)
            if out is None or out.format != "jdbc" or "dbtable" not in out.options:
                errs.append(f"predict.output_source: {self.output_source!r} is not a jdbc source with options.dbtable; "
                            f"sources: {', '.join(sources)}")
            elif out.filter:
                errs.append(f"predict.output_source: {self.output_source!r} has a filter; the table written is "
                            "counted whole")
            elif self.partition_by or self.mode == "overwrite_partitions":
                errs.append("predict.partition_by: a database table is written whole; partitions apply to files and "
                            "catalog tables")
        if self.mode == "overwrite_partitions" and not self.partition_by:
            errs.append("predict.mode: 'overwrite_partitions' needs predict.partition_by")
        twice = sorted({c for c in self.keep if self.keep.count(c) > 1})
        if twice:
            errs.append(f"predict.keep: {', '.join(map(repr, twice))} listed more than once")
        if self.batch_size < 1:
            errs.append(f"predict.batch_size: must be >= 1, got {self.batch_size}")
        if not self.name.isidentifier():
            errs.append(f"predict.name: {self.name!r} is not a valid SQL function name")
        return errs
