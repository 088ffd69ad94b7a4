"""A table with a free-text column (P19): what the text costs prepare (tokenizing and counting in
the JVM for the word vocabulary) and training (tokenizing in the graph, a bag of embeddings), and
the prediction function on raw texts against Spark's predict_batch_udf on the same model.

The table is made by Spark from a seed (reviews of 8 to 32 words out of 2,000, a number, a label
that some words and the number decide) and read back from Parquet, so that generating it is in no
figure. The same rows are prepared twice, with the text in the spec and without it."""
from __future__ import annotations

import statistics
from typing import Any, Callable, Mapping

from benchmarks import cpu, scoring
from benchmarks.context import Bench
from benchmarks.harness import Figure, Result, Sample, timed
from tfos_jobs.contracts.epoch_line import EXAMPLES_PER_SEC

WORDS = 2_000
TEXT = "review"
TEXT_SPEC: dict[str, dict[str, Any]] = {
    "id": {"kind": "key"},
    TEXT: {"kind": "text", "max_tokens": 32, "embedding_dim": 16},
    "x": {"kind": "numeric"},
    "y": {"kind": "label", "task": "binary"},
}
PLAIN_SPEC = {name: f for name, f in TEXT_SPEC.items() if name != TEXT}
TABLE_SQL = (
    "id",
    f"transform(sequence(1, 8 + pmod(hash(id, 0), 25)), i -> concat('w', pmod(hash(id, i), {WORDS}))) AS words",
    "pmod(hash(id, -1), 1000) / 1000.0 AS x",
)
ROW_SQL = (
    "id",
    # Capitals and punctuation: the tokenizer's work is real.
    f"concat(initcap(concat_ws(' ', slice(words, 1, 2))), ', ', concat_ws(' ', slice(words, 3, 40)), '!') AS {TEXT}",
    "x",
    "cast(array_contains(words, 'w7') OR array_contains(words, 'w11') OR x > 0.9 AS int) AS y",
)


def texts(bench: Bench) -> None:
    from tfos_jobs import api

    spark, rows = bench.spark, bench.sizes.p19_rows
    raw = f"{bench.work}/p19-raw"
    spark.range(rows).selectExpr(*TABLE_SQL).selectExpr(*ROW_SQL).write.mode("overwrite").parquet(raw)
    table = spark.read.parquet(raw)
    bench.run.sizes["P19 rows"] = (f"{rows:,} rows: a review of 8-32 words out of {WORDS:,} (max_tokens 32), a "
                                   "number, a binary label")

    def prepare(spec: Mapping[str, Any], name: str) -> Callable[[], Sample]:
        def once() -> None:
            api.prepare(spark, spec=dict(spec), tables={"rows": table}, output=f"{bench.work}/p19-{name}",
                        overwrite=True, log=lambda _: None)
        return lambda: {"rows_per_sec": rows / timed(once)}

    out = bench.repeat("prepare with and without a text", {"text": prepare(TEXT_SPEC, "text"),
                                                            "no text": prepare(PLAIN_SPEC, "plain")})
    bench.run.results.append(Result(
        "P19a", "prepare rows/s with a text column (tokens, the word vocabulary, cuts counted) vs the same rows "
                "without it",
        Figure("prepare with the text", "rows/s", out["text"]["rows_per_sec"]),
        Figure("prepare without it", "rows/s", out["no text"]["rows_per_sec"]), 0.5, ">="))
    _training(bench)
    _serving(bench)


def _training(bench: Bench) -> None:
    from tfos_jobs.config import ModelConfig, TrainConfig
    from tfos_jobs.jobs.train.driver import job as train

    def variant(name: str) -> Callable[[], Sample]:
        def once() -> Sample:
            tr = TrainConfig(dataset=f"{bench.work}/p19-{name}", model_dir=f"{bench.work}/p19-model-{name}",
                             strategy="local", epochs=bench.sizes.train_epochs, batch_size=bench.sizes.p19_batch,
                             tensorboard=False, model=ModelConfig(first_layer_size=64, num_layers=2))
            metrics = train.run(bench.spark, tr, overwrite=True, log=bench.indented)
            steady = metrics["history"][1:] or metrics["history"]  # the first epoch traces the functions
            return {"examples_per_sec": statistics.fmean(e[EXAMPLES_PER_SEC] for e in steady)}
        return once

    out = bench.repeat("training with and without a text", {"text": variant("text"), "no text": variant("plain")},
                       warmup=False, repeats=bench.sizes.train_repeats)
    bench.run.results.append(Result(
        "P19b", f"training examples/s, local strategy, batch {bench.sizes.p19_batch:,}: the model with the text (a "
                "bag of word embeddings, tokenized in the graph) vs the same rows without it",
        Figure("with the text", "examples/s", out["text"]["examples_per_sec"]),
        Figure("without it", "examples/s", out["no text"]["examples_per_sec"]), 0.3, ">="))


def _serving(bench: Bench) -> None:
    import udfs

    spark, batch = bench.spark, bench.sizes.p19_batch * 10
    udf = udfs.register(spark, "bench_text", f"{bench.work}/p19-model-text", batch_size=batch)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch))
    spec = udf.spec
    columns = ", ".join(spec.model_inputs)
    inputs = spark.read.parquet(f"{bench.work}/p19-raw").select(*spec.model_inputs)
    inputs = inputs.repartition(spark.sparkContext.defaultParallelism * 2).cache()
    rows = inputs.count()
    inputs.createOrReplaceTempView("bench_texts")
    spark.udf.register("bench_text_spark", scoring.spark_predict_batch_udf(udf.local_dir, spec, batch))
    meter = cpu.Meter(spark)

    def query(function: str) -> Callable[[], Sample]:
        def once() -> None:
            n = spark.sql(scoring.score_sql(function, spec.label.task, "bench_texts", columns)).first()["n"]
            if n != rows:
                raise RuntimeError(f"{function} scored {n} of {rows} rows")
        return lambda: {"rows_per_sec": rows / meter.around(once)[0]}

    out = bench.repeat("the prediction function on texts", {"UDF": query("bench_text"),
                                                             "predict_batch_udf": query("bench_text_spark")},
                       repeats=bench.sizes.serving_repeats)
    inputs.unpersist()
    bench.run.results.append(Result(
        "P19c", "SQL UDF rows/s on raw texts vs Spark's predict_batch_udf with the documented make_predict_fn "
                f"(same SavedModel, rows, Arrow batch size {batch:,})",
        Figure("SQL UDF", "rows/s", out["UDF"]["rows_per_sec"]),
        Figure("predict_batch_udf", "rows/s", out["predict_batch_udf"]["rows_per_sec"]), 1.5, ">="))
