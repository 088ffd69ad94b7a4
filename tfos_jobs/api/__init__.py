"""The Python API: prepare, train, sweep and serve from a notebook or a script, one call each.

Every function is keyword-only and typed, checks its settings before any Spark job runs (an
error names the argument or config key), and returns a typed result. The `tfos` commands are
thin clients of these functions (`api.session(config=...)` starts theirs), and the demos
(demos/) walk through them. Example (docs/python_api.md, examples/python_api.py)::

    from tfos_jobs import api, config
    from tfos_jobs.config import TrainConfig

    spark = api.session(master="local[2]")
    census = config.load("conf/census.toml")
    manifest = api.prepare(spark, config=census, output="out/dataset", tables={"people": people_df})
    result = api.train(spark, dataset=manifest, model_dir="out/model", build=my_build, config=TrainConfig(epochs=2))
    predict = api.register(spark, name="predict_income", model=result)
    spark.sql("SELECT predict_income(struct(*)) FROM people").show()

Each step takes what the one before returned (a `Manifest`, a `TrainResult`), or the location; settings come one way, a
typed config (`Config`, or one of its sections; `Config.with_settings` changes one by dotted keys). Stable: `__all__`,
the keyword arguments, the results' fields (added to, never changed without a release note).
"""
from __future__ import annotations

from tfos_jobs.api.data import (DatasetManifest, check_sources, generate, prepare,
                                replay_rows, session)
from tfos_jobs.api.demos import demo, demo_stream, demo_warehouse
from tfos_jobs.api.queries import serve_sql, show
from tfos_jobs.api.serving import baseline, evaluate, predict, register, register_saved_model, replay, sql, stream
from tfos_jobs.api.training import SweepResult, TrainResult, check_model, check_sweep, sweep, train
from tfos_jobs.contracts.prediction import PredictionSummary
from tfos_jobs.model.train_function import CheckedFunction
from udfs import PredictionUdf, SignatureUdf

__all__ = ["session", "generate", "check_sources", "prepare", "check_model", "train", "check_sweep", "sweep", "register",
           "register_saved_model", "sql",
           "show", "serve_sql", "predict", "evaluate", "baseline", "stream", "replay_rows", "replay", "demo",
           "demo_stream", "demo_warehouse", "DatasetManifest", "TrainResult", "SweepResult",
           "PredictionUdf", "SignatureUdf", "PredictionSummary", "CheckedFunction"]
