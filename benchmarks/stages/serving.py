"""Serving: the SQL UDF against the model called in one process and against Spark's own
predict_batch_udf (P4, P9) and, on a registered model, against MLflow's spark_udf (P12); SQL at two
sizes (P5b); `tfos predict` against a plain write."""
from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any, Callable

from benchmarks import cpu, scoring
from benchmarks.context import Bench, Run
from benchmarks.stages import registered
from benchmarks.harness import Figure, Result, Sample, fmt, ratio
from tfos_jobs.config import Config
from tfos_jobs.data.assemble import assemble

NOOP = "bench_noop"  # the no-op Arrow UDF: the floor of P4 and of P12
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"  # the session's rows per Arrow batch, for every UDF


def _scored_inputs(bench: Bench) -> tuple[Any, Any, str, Any, int]:
    """The model's function registered, the 16x rows it scores cached as `bench_inputs`, and beside it the no-op
    Arrow UDF and Spark's predict_batch_udf: (udf, spec, task, inputs, rows)."""
    from pyspark.sql.functions import ArrowUDFType, arrow_udf

    import udfs
    from tfos_jobs.contracts.serving import udf_return_type

    spark, pr = bench.spark, bench.big.predict
    udf = udfs.register(spark, pr.name, pr.model, batch_size=pr.batch_size)
    spark.conf.set(ARROW_BATCH, str(pr.batch_size))  # Arrow batches as large as the model's calls, for every UDF here
    spec, task = udf.spec, udf.spec.label.task
    table, _ = assemble(spark, dataclasses.replace(bench.big, features=spec), for_prediction=True)
    inputs = table.select(*spec.model_inputs).repartition(spark.sparkContext.defaultParallelism * 2).cache()
    rows = inputs.count()
    inputs.createOrReplaceTempView("bench_inputs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        spark.udf.register(NOOP, arrow_udf(scoring.make_noop(task), udf_return_type(task),
                                                     ArrowUDFType.SCALAR_ITER))
    spark.udf.register("bench_spark_udf", scoring.spark_predict_batch_udf(udf.local_dir, spec, pr.batch_size))
    bench.run.sizes["P4 rows"] = (f"{rows:,} rows (16x people, the model's {len(spec.model_inputs)} inputs), cached, "
                                 f"Arrow batches of {pr.batch_size:,} rows")
    return udf, spec, task, inputs, rows


def _measured(bench: Bench, rows: int) -> Callable[[Callable[[], object]], Sample]:
    meter = cpu.Meter(bench.spark)

    def measured(call: Callable[[], object]) -> Sample:
        """rows/s, and CPU seconds per 100k rows of the JVM, the Python workers and this driver."""
        wall, used = meter.around(call)
        sample = {"rows_per_sec": rows / wall}
        if meter.usable:
            sample.update({f"cpu {k}": 1e5 * v / rows for k, v in used.items()})
        return sample
    return measured


def jvm_alone(bench: Bench) -> None:
    """`--only P4j`: P4j and P9j after the data and model `streaming.ready` makes."""
    _, spec, task, inputs, rows = _scored_inputs(bench)
    jvm_function(bench, bench.big.predict, task, ", ".join(spec.model_inputs), rows, _measured(bench, rows))
    inputs.unpersist()


def serving(bench: Bench) -> None:
    from tfos_jobs.contracts.serving import CODES_SIGNATURE
    from tfos_jobs.jobs.serve import sql
    from tfos_jobs.model.export import load_signature
    from udfs.predict import settle_heap

    spark, pr = bench.spark, bench.big.predict
    udf, spec, task, inputs, rows = _scored_inputs(bench)
    with_spec = dataclasses.replace(bench.big, features=spec)
    arrays = scoring.numpy_inputs(inputs.toPandas(), spec)
    signature = load_signature(udf.local_dir)
    codes_signature = load_signature(udf.local_dir, CODES_SIGNATURE)
    codes = scoring.codes_inputs(arrays, spec)
    settle_heap()  # the in-process side gets the heap the UDF's workers have (udfs.predict.settle_heap)
    measured = _measured(bench, rows)

    def query(function: str, args: str = "struct(*)", plain: bool = False,
              table: str = "bench_inputs") -> Callable[[], Sample]:
        def once() -> None:
            n = spark.sql(scoring.score_sql(function, task, table, args, plain)).first()["n"]
            if n != rows:
                raise RuntimeError(f"{function} scored {n} of {rows} rows")
        return lambda: measured(once)

    columns = ", ".join(spec.model_inputs)  # as `tfos predict` and the DataFrame form call it
    out = bench.repeat("SQL UDF", {
        "in-process": lambda: measured(lambda: scoring.in_process_rows_per_sec(signature, arrays, pr.batch_size)),
        "in-process, serving_codes": lambda: measured(
            lambda: scoring.in_process_codes_rows_per_sec(codes_signature, codes, pr.batch_size)),
        "UDF": query(pr.name, columns),
        "UDF, struct(*)": query(pr.name),
        "no-op UDF": query(NOOP, columns),
        "predict_batch_udf": query("bench_spark_udf", columns),
    }, repeats=bench.sizes.serving_repeats)
    for variant, figures in out.items():
        for key, values in figures.items():
            if key.startswith("cpu "):
                bench.run.details[f"P4 {variant} {key}"] = Figure(f"{variant}: {key[4:]}", "CPU s per 100k rows", values)
    bench.run.results.append(Result(
        "P4", "SQL UDF rows/s on local[2] (the columns as arguments) vs the concrete function called in one "
              "process (same rows, batch size)",
        Figure("SQL UDF", "rows/s", out["UDF"]["rows_per_sec"]),
        Figure("concrete function, in-process", "rows/s", out["in-process"]["rows_per_sec"]), 0.5, ">="))
    bench.run.results.append(Result(
        "P4f", "SQL UDF rows/s vs a no-op Arrow UDF with the same input and output (the floor: what Spark's Arrow "
               "round trip to a Python worker costs without a model)",
        Figure("SQL UDF", "rows/s", out["UDF"]["rows_per_sec"]),
        Figure("no-op Arrow UDF", "rows/s", out["no-op UDF"]["rows_per_sec"]), 0.85, ">="))
    bench.run.results.append(Result(
        "P9", "SQL UDF rows/s vs Spark's predict_batch_udf with the documented make_predict_fn (same SavedModel, "
              "rows, Arrow batch size)",
        Figure("SQL UDF", "rows/s", out["UDF"]["rows_per_sec"]),
        Figure("predict_batch_udf", "rows/s", out["predict_batch_udf"]["rows_per_sec"]), 1.5, ">="))
    bench.run.details["udf floor"] = Figure("no-op Arrow UDF, same input and output", "rows/s",
                                           out["no-op UDF"]["rows_per_sec"])
    bench.run.details["udf struct"] = Figure("the UDF on struct(*)", "rows/s", out["UDF, struct(*)"]["rows_per_sec"])
    bench.run.details["in-process codes"] = Figure("serving_codes in-process, same rows", "rows/s",
                                                  out["in-process, serving_codes"]["rows_per_sec"])

    jvm_function(bench, pr, task, columns, rows, measured)
    batch_sweep(bench, measured, lambda name: query(name, columns), signature, arrays)
    registered.registered_vs_mlflow(bench, udf.local_dir, spec, inputs, query, NOOP)
    inputs.unpersist()

    def sql_variant(cfg: Config) -> Callable[[], Sample]:
        def once() -> Sample:
            started = time.perf_counter()
            sql.open_views(spark, cfg, spec)
            spark.sql(scoring.score_sql(pr.name, task, sql.FEATURES_VIEW)).collect()
            return {"seconds": time.perf_counter() - started}
        return once

    small = dataclasses.replace(bench.small, features=spec)
    out = bench.repeat("SQL at 1x and 16x", {"1x": sql_variant(small), "16x": sql_variant(with_spec)})
    bench.run.results.append(Result(
        "P5b", "SQL inference time (views over the raw tables + the UDF on every row) at 16x rows vs 1x rows",
        Figure("SQL at 16x", "s", out["16x"]["seconds"]), Figure("SQL at 1x", "s", out["1x"]["seconds"]),
        16.0, "<="))


JVM_NAME = "bench_jvm"  # the prediction function scoring in the executor JVM (`predict.engine = "jvm"`)


def jvm_function(bench: Bench, pr: Any, task: str, columns: str, rows: int,
                 measured: Callable[[Callable[[], object]], Sample]) -> None:
    """P4j, P9j: the same function scored in the executor JVM by TensorFlow Java, against the no-op Arrow UDF (the
    floor every Python UDF pays) and Spark's predict_batch_udf; beside it the Python UDF, every field consumed."""
    import udfs

    spark = bench.spark
    udfs.register(spark, JVM_NAME, pr.model, batch_size=pr.batch_size, engine="jvm")

    def query(function: str) -> Callable[[], Sample]:
        sql = scoring.every_field_sql(function, task, "bench_inputs", columns)

        def once() -> None:
            n = spark.sql(sql).first()["n"]
            if n != rows:
                raise RuntimeError(f"{function} scored {n} of {rows} rows")
        return lambda: measured(once)

    out = bench.repeat("JVM function", {
        "JVM function": query(JVM_NAME),
        "Python UDF": query(pr.name),
        "no-op UDF": query(NOOP),
        "predict_batch_udf": query("bench_spark_udf"),
    }, repeats=bench.sizes.serving_repeats)
    jvm = Figure("JVM function", "rows/s", out["JVM function"]["rows_per_sec"])
    bench.run.results.append(Result(
        "P4j", "the prediction function scored in the executor JVM (TensorFlow Java) vs the no-op Arrow UDF, the "
               "floor of any Python UDF (same rows, columns, batch size; every output field consumed)",
        jvm, Figure("no-op Arrow UDF", "rows/s", out["no-op UDF"]["rows_per_sec"]), 1.3, ">="))
    bench.run.results.append(Result(
        "P9j", "the prediction function scored in the executor JVM vs Spark's predict_batch_udf (same SavedModel, "
               "rows, batch size)",
        jvm, Figure("predict_batch_udf", "rows/s", out["predict_batch_udf"]["rows_per_sec"]), 2.0, ">="))
    bench.run.details["jvm vs python"] = Figure("the Python UDF, every field consumed", "rows/s",
                                                out["Python UDF"]["rows_per_sec"])


def batch_sweep(bench: Bench, measured: Callable[[Callable[[], object]], Sample],
                udf_query: Callable[[str], Callable[[], Sample]], signature: Any, arrays: dict[str, Any]) -> None:
    """P4 again at other batch sizes, the Arrow batches (spark.sql.execution.arrow.maxRecordsPerBatch)
    and the model's calls (a function registered with that batch size) alike: fewer, larger
    batches spread Spark's per-batch conversion cost over more rows."""
    import udfs

    spark, pr = bench.spark, bench.big.predict
    configured = pr.batch_size
    variants: dict[str, Callable[[], Sample]] = {}
    for size in sorted({2_000, configured, 50_000}):
        udfs.register(spark, f"{pr.name}_{size}", pr.model, batch_size=size)

        def udf_at(size: int = size, scored: Callable[[], Sample] = udf_query(f"{pr.name}_{size}")) -> Sample:
            spark.conf.set(ARROW_BATCH, str(size))
            return scored()
        variants[f"UDF {size}"] = udf_at
        variants[f"in-process {size}"] = (
            lambda size=size: measured(lambda: scoring.in_process_rows_per_sec(signature, arrays, size)))
    out = bench.repeat("Arrow batch size", variants, warmup=False)
    spark.conf.set(ARROW_BATCH, str(configured))
    for name, figures in out.items():
        bench.run.details[f"batch {name}"] = Figure(name, "rows/s", figures["rows_per_sec"])
        if "cpu python workers" in figures:
            bench.run.details[f"batch cpu {name}"] = Figure(name, "CPU s per 100k rows", figures["cpu python workers"])


def predict_vs_write(bench: Bench) -> None:
    """`tfos predict` (joins, scoring, write, check) against writing the same joined rows to
    Parquet without a model: what scoring adds to a job that has to run anyway."""
    from tfos_jobs.jobs.serve import predict
    from udfs.model_location import served_spec

    spark, cfg = bench.spark, bench.big
    spec = served_spec(spark, cfg.predict.model, setting="predict.model")
    with_spec = dataclasses.replace(cfg, features=spec)
    rows = assemble(spark, with_spec, for_prediction=True)[0].count()
    bench.run.sizes["predict rows"] = f"{rows:,} rows (16x people joined with regions and events), Parquet out"

    def predicted() -> Sample:
        started = time.perf_counter()
        summary = predict.run(spark, cfg, overwrite=True, log=lambda _: None)
        if summary.rows != rows:
            raise RuntimeError(f"tfos predict wrote {summary.rows} of {rows} rows")
        return {"rows_per_sec": rows / (time.perf_counter() - started)}

    def written() -> Sample:
        started = time.perf_counter()
        table, _ = assemble(spark, with_spec, for_prediction=True)
        table.write.mode("overwrite").parquet(f"{bench.work}/joined-16x")
        return {"rows_per_sec": rows / (time.perf_counter() - started)}

    out = bench.repeat("predict vs write", {"tfos predict": predicted, "Parquet write": written})
    bench.run.details["predict rows"] = Figure("tfos predict", "rows/s", out["tfos predict"]["rows_per_sec"])
    bench.run.details["write rows"] = Figure("Parquet write of the same joined rows, no model", "rows/s",
                                            out["Parquet write"]["rows_per_sec"])


# -- P4's sections of the report -----------------------------------------------------------

def batch_sizes(run: Run) -> list[str]:
    """P4 at each Arrow batch size tried."""
    sizes = sorted(int(k.rsplit(" ", 1)[1]) for k in run.details if k.startswith("batch UDF "))
    if not sizes:
        return []
    lines = ["P4 at other Arrow batch sizes (`spark.sql.execution.arrow.maxRecordsPerBatch`, and the same batch "
             "size for the function's model calls and the in-process calls):", "",
             "| rows per Arrow batch | SQL UDF rows/s | in-process rows/s | ratio | UDF: Python-worker CPU s per 100k rows |",
             "|---|---|---|---|---|"]
    for size in sizes:
        udf, local = run.details[f"batch UDF {size}"], run.details[f"batch in-process {size}"]
        cpu_used = run.details.get(f"batch cpu UDF {size}")
        lines.append(f"| {size:,} | {fmt(udf.median)} ({udf.spread()}) | {fmt(local.median)} ({local.spread()}) | "
                     f"{fmt(ratio(udf.median, local.median))} | {fmt(cpu_used.median) if cpu_used else '—'} |")
    return lines + [""]


def p4_cpu(run: Run) -> list[str]:
    """Where P4's time goes: CPU seconds per 100k rows, by process group."""
    variants = ("in-process", "in-process, serving_codes", "UDF", "UDF, struct(*)", "no-op UDF", "predict_batch_udf")
    groups = ("jvm", "python workers", "driver")
    if not all(f"P4 {v} cpu {g}" in run.details for v in variants for g in groups):
        return []
    lines = ["P4, CPU seconds per 100k rows (median), by process:", "",
             "| | Spark JVM | Python workers | driver (this process) | total |", "|---|---|---|---|---|"]
    for v in variants:
        cells = [run.details[f"P4 {v} cpu {g}"].median for g in groups]
        lines.append(f"| {v} | " + " | ".join(fmt(c) for c in cells) + f" | {fmt(sum(cells))} |")
    return lines + [""]
