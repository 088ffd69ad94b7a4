"""The commands that read a config: each takes it loaded and checked, calls the Python API (which
starts every session: `api.session(config=...)`), and returns the exit code. Importing this module
loads the API, and Spark's Python side with it: only a command that runs does."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from tfos_jobs import api
from tfos_jobs import config as config_mod
from tfos_jobs.config import Config
from tfos_jobs.config import sweep as sweep_file

Args = argparse.Namespace


def cmd_generate(config: Config, args: Args) -> int:
    api.generate(config=config)
    return 0


def cmd_evaluate(config: Config, args: Args) -> int:
    api.evaluate(api.session(config=config), config=config, scores=args.scores, truth=args.truth)
    return 0


def cmd_baseline(config: Config, args: Args) -> int:
    api.baseline(api.session(config=config), config=config, predictions=args.predictions)
    return 0


def cmd_prepare(config: Config, args: Args) -> int:
    api.prepare(api.session(config=config), config=config, output=config.prepare.output, overwrite=args.overwrite)
    return 0


def cmd_train(config: Config, args: Args) -> int:
    checked = api.check_model(config=config)  # a wrong model or training function fails here, before Spark starts
    spark = api.session(config=config)
    if isinstance(checked, api.CheckedFunction):
        api.train(spark, fn=checked, config=config, overwrite=args.overwrite)
    else:
        api.train(spark, build=checked, config=config, overwrite=args.overwrite)
    return 0


def cmd_predict(config: Config, args: Args) -> int:
    api.predict(api.session(config=config), config=config, model=args.model or None, overwrite=args.overwrite)
    return 0


def cmd_sql(config: Config, args: Args) -> int:
    spark = api.session(config=config)
    result = api.sql(spark, config=config, script=args.sql or "", file=args.file or "", model=args.model,
                     name=args.name)
    api.show(spark, result=result, output=args.output, rows=args.rows)
    return 0


def cmd_serve_sql(config: Config, args: Args) -> int:
    api.serve_sql(config=config, reload=lambda: config_mod.load(args.config, args.loaded_overrides),
                  log=lambda line: print(line, flush=True))
    return 0


def cmd_demo(config: Config, args: Args) -> int:
    api.demo(config=config)
    return 0


def cmd_sources(config: Config, args: Args) -> int:
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    report = api.check_sources(api.session(config=config), config=config, only=args.only or (), count=args.count,
                               log=log)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 2


def cmd_demo_warehouse(config: Config, args: Args) -> int:
    return 0 if api.demo_warehouse(config=config) else 1


def cmd_sweep(config: Config, args: Args) -> int:
    space = api.check_sweep(config=config, space=sweep_file.load(args.space, args.space_overrides))  # before Spark
    # Trials are one-task jobs: the driver's own trial and epoch lines replace Spark's console bar.
    quiet = {**config.spark.conf, "spark.ui.showConsoleProgress": "false"}
    spark = api.session(config=dataclasses.replace(config, spark=dataclasses.replace(config.spark, conf=quiet)))
    return 0 if api.sweep(spark, config=config, space=space).best is not None else 1


def cmd_stream(config: Config, args: Args) -> int:
    if args.model:
        config = dataclasses.replace(config, stream=dataclasses.replace(config.stream, model=args.model))
    api.stream(api.session(config=config, kafka=True), config=config, log=lambda line: print(line, flush=True))
    return 0


def cmd_replay(config: Config, args: Args) -> int:
    spark = api.session(config=config)
    rows = api.replay_rows(spark, config=config, source=args.source, where=args.where)
    features = config.features
    api.replay(spark, rows=rows, bootstrap_servers=config.stream.bootstrap_servers,
               topic=args.topic or config.stream.topic, rate=args.rate, key=features.key.name if features.key else None,
               order_by=features.time.name if features.is_sequence else None, disorder=args.disorder,
               partitions=args.partitions)
    return 0


def cmd_demo_stream(config: Config, args: Args) -> int:
    return 0 if api.demo_stream(config=config) else 1


COMMANDS = {"sweep": cmd_sweep, "generate": cmd_generate, "prepare": cmd_prepare, "train": cmd_train, "predict": cmd_predict,
            "sql": cmd_sql, "serve-sql": cmd_serve_sql, "demo": cmd_demo, "evaluate": cmd_evaluate, "baseline": cmd_baseline, "sources": cmd_sources,
            "demo-warehouse": cmd_demo_warehouse, "stream": cmd_stream, "replay": cmd_replay,
            "demo-stream": cmd_demo_stream}
