"""`tfos demo`: the embedded data generated, then every job on it through the Python API (its
checks included), printing each step."""
from __future__ import annotations

import os

from tfos_jobs import resources
from tfos_jobs.config import Config
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.data import fleet
from tfos_jobs.data.fleet import Session


def run(cfg: Config, session: Session) -> int:
    """The census pipeline, or the fleet's for a spec of sensor windows."""
    from tfos_jobs import api
    from tfos_jobs.data import synthetic
    from tfos_jobs.data.dataset import summary
    from tfos_jobs.jobs.serve import sql

    if cfg.features.is_sequence:
        return _fleet(cfg, session)
    syn = cfg.synthetic
    spark = session()
    print(f"== generate: {syn.people:,} people into {syn.output}")
    counts = synthetic.generate(spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
    print("   " + ", ".join(f"{k} {v:,} rows" for k, v in counts.items()))
    print(f"== prepare: {cfg.prepare.output}")
    manifest = api.prepare(spark, config=cfg, output=cfg.prepare.output, overwrite=True)
    print(summary(manifest))
    print(f"== train: {cfg.train.strategy}, {cfg.train.workers} workers, into {cfg.train.model_dir}")
    api.train(spark, dataset=manifest, config=cfg, overwrite=True)
    query = resources.demo_query()
    print(f"== SQL: {os.path.relpath(query)}, with {cfg.predict.name}() registered")
    with open(query, encoding="utf-8") as fh:
        sql.show(spark, api.sql(spark, config=cfg, script=fh.read()), rows=20)
    print(f"== predict: into {cfg.predict.output}")
    api.predict(spark, config=cfg, overwrite=True)
    model_dir = ModelDir(cfg.train.model_dir)
    _artifacts((("raw tables", syn.output), ("dataset", cfg.prepare.output), ("model", model_dir.path),
                ("SavedModel", model_dir.saved_model), ("learning curve", model_dir.learning_curve),
                ("predictions", cfg.predict.output)))
    return 0


def _fleet(cfg: Config, session: Session) -> int:
    from tfos_jobs import api
    from tfos_jobs.data.dataset import summary
    from tfos_jobs.jobs.serve import sql

    fl = cfg.fleet
    print(f"== generate: {fl.assets:,} assets x {fl.steps:,} steps into {fl.output}")
    fleet.write(cfg, session)
    spark = session()
    print(f"== prepare: windows into {cfg.prepare.output}")
    manifest = api.prepare(spark, config=cfg, output=cfg.prepare.output, overwrite=True)
    print(summary(manifest))
    print(f"== train: {cfg.train.model.kind}, {cfg.train.strategy}, {cfg.train.workers} workers, "
          f"into {cfg.train.model_dir}")
    api.train(spark, dataset=manifest, config=cfg, overwrite=True)
    query = resources.demo_query("windows")
    print(f"== SQL: {os.path.relpath(query)}, with {cfg.predict.name}() and the windows view")
    with open(query, encoding="utf-8") as fh:
        sql.show(spark, api.sql(spark, config=cfg, script=fh.read()), rows=10)
    print(f"== predict: one row per window into {cfg.predict.output}")
    api.predict(spark, config=cfg, overwrite=True)
    print("== evaluate: scores against the true anomaly intervals")
    api.evaluate(spark, config=cfg, scores=cfg.predict.output, truth=f"{fl.output}/{fleet.ANOMALIES_DIR}")
    model_dir = ModelDir(cfg.train.model_dir)
    _artifacts((("raw sensors", fl.output), ("dataset", cfg.prepare.output), ("model", model_dir.path),
                ("SavedModel", model_dir.saved_model), ("metrics", model_dir.metrics),
                ("learning curve", model_dir.learning_curve), ("anomaly plot", model_dir.anomaly_plot),
                ("evaluation plot", model_dir.evaluation_plot),
                ("scores", cfg.predict.output)))
    return 0


def _artifacts(places: tuple[tuple[str, str], ...]) -> None:
    """What the demo wrote, and where: absolute paths, cluster URLs as they are."""
    print("== artifacts")
    for what, where in places:
        print(f"  {what:<15} {where if '://' in where else os.path.abspath(where)}")
