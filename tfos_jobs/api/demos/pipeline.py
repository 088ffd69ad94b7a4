"""`tfos demo`: the embedded data generated, then every job on it through the Python API (its
checks included), printing each step."""
from __future__ import annotations

import os

from pyspark.sql import SparkSession

from tfos_jobs import resources
from tfos_jobs.api.data import prepare, session
from tfos_jobs.api.queries import show
from tfos_jobs.api.serving import evaluate, predict, sql
from tfos_jobs.api.training import train
from tfos_jobs.config import Config
from tfos_jobs.contracts.model_dir import ModelDir


def demo(*, config: Config) -> None:
    """Generate the embedded data, then prepare, train, query, predict (and evaluate, for sensor
    windows) on it, printing each step and where it wrote (`tfos demo`, docs/demo.md).

    Stable. Example: ``api.demo(config=config.load("conf/census.toml"))``"""
    from tfos_jobs.data import synthetic

    if config.features.is_sequence:
        _fleet(config)
        return
    syn = config.synthetic
    spark = session(config=config)
    print(f"== generate: {syn.people:,} people into {syn.output}")
    counts = synthetic.generate(spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
    print("   " + ", ".join(f"{k} {v:,} rows" for k, v in counts.items()))
    model_dir = _steps(spark, config, windows=False)
    _artifacts((("raw tables", syn.output), ("dataset", config.prepare.output), ("model", model_dir.path),
                ("SavedModel", model_dir.saved_model), ("learning curve", model_dir.learning_curve),
                ("predictions", config.predict.output)))


def _fleet(config: Config) -> None:
    from tfos_jobs.data import fleet

    fl = config.fleet
    print(f"== generate: {fl.assets:,} assets x {fl.steps:,} steps into {fl.output}")
    fleet.write(config, lambda: session(config=config))
    spark = session(config=config)
    model_dir = _steps(spark, config, windows=True)
    print("== evaluate: scores against the true anomaly intervals")
    evaluate(spark, config=config)  # the scores predict wrote, against the fleet's true anomalies
    _artifacts((("raw sensors", fl.output), ("dataset", config.prepare.output), ("model", model_dir.path),
                ("SavedModel", model_dir.saved_model), ("metrics", model_dir.metrics),
                ("learning curve", model_dir.learning_curve), ("anomaly plot", model_dir.anomaly_plot),
                ("evaluation plot", model_dir.evaluation_plot), ("scores", config.predict.output)))


def _steps(spark: SparkSession, config: Config, *, windows: bool) -> ModelDir:
    """Prepare, train, the demo's query and predict, on rows or on sensor windows."""
    print(f"== prepare: {'windows into ' if windows else ''}{config.prepare.output}")
    manifest = prepare(spark, config=config, output=config.prepare.output, overwrite=True)
    kind = f"{config.train.model.kind}, " if windows else ""
    print(f"== train: {kind}{config.train.strategy}, {config.train.workers} workers, into {config.train.model_dir}")
    train(spark, dataset=manifest, config=config, overwrite=True)
    query = resources.demo_query("windows") if windows else resources.demo_query()
    with_what = "and the windows view" if windows else "registered"
    print(f"== SQL: {os.path.relpath(query)}, with {config.predict.name}() {with_what}")
    with open(query, encoding="utf-8") as fh:
        show(spark, result=sql(spark, config=config, script=fh.read()), rows=10 if windows else 20)
    print(f"== predict: {'one row per window ' if windows else ''}into {config.predict.output}")
    predict(spark, config=config, overwrite=True)
    return ModelDir(config.train.model_dir)


def _artifacts(places: tuple[tuple[str, str], ...]) -> None:
    """What the demo wrote, and where: absolute paths, cluster URLs as they are."""
    print("== artifacts")
    for what, where in places:
        print(f"  {what:<15} {where if '://' in where else os.path.abspath(where)}")
