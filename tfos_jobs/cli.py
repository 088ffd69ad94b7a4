"""`tfos`: the command line. Every command loads and validates its config before Spark starts."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from tfos_jobs import config as config_mod
from tfos_jobs import resources
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.session_builder import LOG_LEVEL


def common_arguments() -> argparse.ArgumentParser:
    """The options every command that reads a config takes (a parent parser; the bench's too)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", required=True, type=resources.config_path,
                        help="a TOML config file, e.g. conf/census.toml, or the name of a shipped sample: "
                             + ", ".join(resources.sample_configs()))
    common.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set prepare.split.eval_fraction=0.25 (repeatable)")
    common.add_argument("--verbose", dest="overrides", action="append_const", const=f"spark.conf.{LOG_LEVEL}=INFO",
                        help=f"Spark's own logs at INFO (same as --set spark.conf.{LOG_LEVEL}=INFO)")
    return common


def _parser() -> argparse.ArgumentParser:
    common = common_arguments()
    parser = argparse.ArgumentParser(prog="tfos", description="Distributed TensorFlow on Apache Spark.")
    sub = parser.add_subparsers(dest="command", required=True)
    _job_commands(sub, common)
    _stream_commands(sub, common)
    _service_commands(sub, common)
    return parser


def _job_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """The jobs: data, prepare, train, predict, SQL, evaluate, sweep, and the sources' check."""
    sub.add_parser("config", parents=[common], help="print the resolved configuration and exit")
    gen = sub.add_parser("generate", parents=[common],
                         help="write the embedded data: census-like tables, or the sensor fleet for a spec of sequences")
    gen.add_argument("--people", type=int, help="number of people (same as --set synthetic.people=N)")
    prep = sub.add_parser("prepare", parents=[common], help="raw tables -> train/eval TFRecords + _meta/")
    prep.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    train = sub.add_parser("train", parents=[common], help="train on a prepared dataset with TensorFlowOnSpark")
    train.add_argument("--overwrite", action="store_true", help="replace a trained model in train.model_dir")
    pred = sub.add_parser("predict", parents=[common], help="score a table with a trained model, write the rows with predictions")
    pred.add_argument("--model", help="model directory (default: predict.model)")
    pred.add_argument("--overwrite", action="store_true", help="replace an existing output")
    sql = sub.add_parser("sql", parents=[common], help="run Spark SQL with the prediction UDF and the sources as views")
    sql.add_argument("--model", help="model directory (default: predict.model)")
    sql.add_argument("--name", help="SQL name of the prediction function (default: predict.name)")
    query = sql.add_mutually_exclusive_group(required=True)
    query.add_argument("-e", dest="sql", metavar="SQL", help="the query")
    query.add_argument("-f", dest="file", metavar="FILE", help="a file of SQL statements, local or on a Hadoop filesystem (hdfs://...); the last one's result is shown")
    sql.add_argument("--output", help="write the result as Parquet here instead of printing it")
    sql.add_argument("--rows", type=int, default=50, help="rows to print (default 50)")
    ev = sub.add_parser("evaluate", parents=[common],
                        help="an autoencoder's window scores against known anomaly intervals: ROC AUC and a plot")
    ev.add_argument("--truth", help="table (Parquet) of anomaly intervals: key, start, end, kind "
                                    "(default: the embedded fleet's, under fleet.output)")
    ev.add_argument("--scores", help="scores written by tfos predict (default: predict.output)")
    sweep = sub.add_parser("sweep", parents=[common], help="hyperparameter sweep: trials in parallel on the executors")
    sweep.add_argument("--space", required=True, type=resources.config_path,
                       help="the sweep file, e.g. conf/sweep.toml or the shipped sample `sweep`; "
                       "--set sweep.KEY=VALUE and --set params.KEY... override it")
    for command, what in ((train, "the trained model"), (sweep, "the sweep's best model")):
        command.add_argument("--register", metavar="NAME",
                             help=f"register {what} as a new version of NAME in MLflow's model registry "
                                  "(same as --set tracking.register=NAME; needs tracking.uri)")
        command.add_argument("--alias", help="set this alias on the new version, e.g. champion "
                                             "(same as --set tracking.alias=ALIAS)")
    srcs = sub.add_parser("sources", parents=[common],
                          help="read every source: columns, rows, read tasks, files, pruned partitions and "
                               "pushed-down filters, then the spec check; errors for each one that cannot be read")
    srcs.add_argument("--only", action="append", metavar="NAME", help="check only this source (repeatable)")
    srcs.add_argument("--no-count", dest="count", action="store_false", help="do not count rows (no Spark job)")
    srcs.add_argument("--json", action="store_true", help="print the report as JSON")


def _stream_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Kafka in and out: score a topic, replay a source into one, the streaming demo."""
    stream = sub.add_parser("stream", parents=[common],
                            help="score a Kafka topic as events arrive (rows, or sensor readings cut into windows): "
                                 "Parquet exactly once, a Kafka topic at least once, bad events quarantined")
    stream.add_argument("--model", help="model directory or models:/NAME@alias (default: stream.model, else predict.model)")
    replay = sub.add_parser("replay", parents=[common],
                            help="send a source's rows to a Kafka topic as JSON events at a fixed rate")
    replay.add_argument("--source", help="the source whose rows are sent (default: prepare.main, with its unions)")
    replay.add_argument("--where", help="a SQL condition on the rows, e.g. \"ts >= '2026-01-10'\"")
    replay.add_argument("--rate", type=float, default=1000.0, help="events per second (0: as fast as possible; default 1000)")
    replay.add_argument("--disorder", type=int, default=0, help="displace each event by up to N places (default 0)")
    replay.add_argument("--topic", help="the topic (default: stream.topic; created when missing)")
    replay.add_argument("--partitions", type=int, default=2, help="partitions of a topic created (default 2)")
    sub.add_parser("demo-stream", parents=[common],
                   help="replay the fleet's last readings into Kafka, score them with tfos stream as they arrive, "
                        "and compare the stream's anomaly ROC AUC with batch scoring of the same readings")


def _service_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """The demos, the servers, packaging and submitting, the bench."""
    sub.add_parser("demo", parents=[common], help="generate the default data and run the pipeline on it")
    serve = sub.add_parser("serve-sql", parents=[common],
                           help="serve SQL clients (beeline, JDBC/ODBC) with the prediction functions registered")
    serve.add_argument("--port", type=int, help="same as --set serve_sql.port=N (default 10000)")
    serve.add_argument("--bind", help="same as --set serve_sql.bind=ADDRESS (default 127.0.0.1; others need auth)")
    sub.add_parser("demo-warehouse", parents=[common],
                   help="load the embedded tables into a local PostgreSQL and Hive tables, prepare from there, "
                        "and compare the records with those prepared from the Parquet files")
    server = sub.add_parser("connect-server",
                            help="start or stop a Spark Connect server for this package's clients (its jar, its "
                                 "Python on the executors): tfos connect-server start --dir DIR, then --set spark.remote=URL")
    server.add_argument("action", choices=("start", "stop"))
    server.add_argument("--dir", required=True, type=Path, help="where the server keeps its log and pid")
    server.add_argument("--master", default="local-cluster[2,1,2048]", help="the server's master (default %(default)s)")
    server.add_argument("--port", type=int, default=15002, help="the gRPC port (default %(default)s)")
    server.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a setting (repeatable)")
    pack = sub.add_parser("pack-env", help="pack this virtualenv, with the package, as a .tar.gz for --archives "
                                            "(YARN containers run the jobs in it)")
    pack.add_argument("output", help="the archive to write, e.g. tfos-env.tar.gz")
    sub.add_parser("submit", add_help=False,
                   help="spark-submit a job with the TFRecord jar and, with --env-archive, the packed environment: "
                        "tfos submit [spark-submit options] JOB [job options] (--dry-run prints the command)")
    bench = sub.add_parser("bench", add_help=False,
                           help="measure every stage against its baseline, from a source checkout (benchmarks/): "
                                "tfos bench --config FILE [bench options] (tfos bench --help lists them)")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="handed to the bench as they are")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["submit"]:  # spark-submit's options are not ours to parse
        return _submit(argv[1:])
    if argv[:1] == ["bench"]:  # nor are the bench's, which lives outside the package
        return _bench(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "pack-env":
        return _pack_env(args.output)
    if args.command == "connect-server":
        from tfos_jobs.deploy import connect_server

        return connect_server.main(args.action, args.dir, master=args.master, port=args.port, conf=args.conf)
    try:
        overrides = list(args.overrides)
        if getattr(args, "people", None) is not None:
            overrides.append(f"synthetic.people={args.people}")
        for key in ("register", "alias"):
            if getattr(args, key, None):
                overrides.append(f"tracking.{key}={json.dumps(getattr(args, key))}")
        if args.command == "sweep":
            args.space_overrides = [o for o in overrides if o.startswith(("sweep.", "params."))]
            overrides = [o for o in overrides if o not in args.space_overrides]
            args.base_overrides = overrides
        if args.command == "serve-sql":
            overrides += [f"serve_sql.{k}={json.dumps(v)}" for k in ("port", "bind") if (v := getattr(args, k)) is not None]
        args.loaded_overrides = overrides
        cfg = config_mod.load(args.config, overrides)
        if args.command == "config":
            print(json.dumps(config_mod.to_dict(cfg), indent=2))
            return 0
        return COMMANDS[args.command](cfg, args)
    except TfosError as e:
        print(f"tfos {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        _stop_session()


def _submit(argv: list[str]) -> int:
    from tfos_jobs.deploy import submit

    try:
        return submit.run(argv, sorted(COMMANDS))
    except TfosError as e:
        print(f"tfos submit: error: {e}", file=sys.stderr)
        return 2


BENCH_MISSING = ("tfos bench: error: the benchmarks are not part of the installed package: they live in the "
                 "source repository (benchmarks/; run them there with `make bench` or `python -m benchmarks`)")


def _bench(argv: list[str]) -> int:
    """`tfos bench ARGS`: `benchmarks.cli.main(ARGS)`, from the source checkout the package is
    installed from (editable); imported only now, so no other command pays for it."""
    import importlib
    import importlib.util

    import tfos_jobs

    root = Path(tfos_jobs.__file__).resolve().parents[1]
    if not (root / "benchmarks" / "cli.py").is_file():
        print(BENCH_MISSING, file=sys.stderr)
        return 2
    spec = importlib.util.find_spec("benchmarks")
    if spec is None or spec.origin is None or Path(spec.origin).resolve().parent != root / "benchmarks":
        sys.path.insert(0, str(root))
    bench_cli = importlib.import_module("benchmarks.cli")
    return bench_cli.main(argv, prog="tfos bench")


def _pack_env(output: str) -> int:
    from tfos_jobs.deploy import env_archive

    try:
        env_archive.pack(output)
    except TfosError as e:
        print(f"tfos pack-env: error: {e}", file=sys.stderr)
        return 2
    return 0


def _stop_session() -> None:
    """Stop Spark before the interpreter exits: local-cluster masters otherwise keep
    relaunching executors while the JVM shuts down."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def _session(cfg, extra: dict[str, str] | None = None):
    """The session; GPU training needs Spark's resource settings before the context starts."""
    from tfos_jobs import session_builder
    from tfos_jobs.jobs.train.driver.gpu import discovery_script, gpu_conf

    script = discovery_script(cfg.train.gpu_discovery_script, resources.gpu_discovery_script(),
                              os.environ.get("PYSPARK_PYTHON", ""))
    return session_builder.build(cfg.spark, {**gpu_conf(cfg.train, script), **(extra or {})})


def cmd_generate(cfg, args) -> int:
    from tfos_jobs.data import fleet, synthetic

    if cfg.features.is_sequence:
        fleet.write(cfg, lambda: _session(cfg))
        return 0
    syn = cfg.synthetic
    spark = _session(cfg)
    counts = synthetic.generate(spark, syn.output, syn.people, syn.events_per_person, syn.seed, syn.as_of)
    print(f"wrote {syn.output}: " + ", ".join(f"{k} {v:,} rows" for k, v in counts.items()))
    return 0


def cmd_evaluate(cfg, args) -> int:
    from tfos_jobs import api

    api.evaluate(_session(cfg), config=cfg, scores=args.scores, truth=args.truth)
    return 0


def cmd_prepare(cfg, args) -> int:
    from tfos_jobs import api
    from tfos_jobs.data.dataset import summary

    manifest = api.prepare(_session(cfg), config=cfg, output=cfg.prepare.output, overwrite=args.overwrite)
    print(summary(manifest))
    return 0


def cmd_train(cfg, args) -> int:
    from tfos_jobs import api
    from tfos_jobs.model.builder import check_model

    model = check_model(model_cfg=cfg.train.model, spec=cfg.features)  # a wrong model fails here, before Spark starts
    api.train(_session(cfg), build=model, config=cfg, overwrite=args.overwrite)
    return 0


def cmd_predict(cfg, args) -> int:
    from tfos_jobs import api

    api.predict(_session(cfg), config=cfg, model=args.model or None, overwrite=args.overwrite)
    return 0


def cmd_sql(cfg, args) -> int:
    from tfos_jobs import api
    from tfos_jobs.jobs.serve import sql

    if args.file and config_mod.is_url(args.file):  # e.g. hdfs://...: read with the session's Hadoop settings
        from tfos_jobs.storage import Storage, StorageError

        spark = _session(cfg)
        try:
            script = Storage(spark).read_text(args.file)
        except StorageError as e:
            raise ConfigError(f"-f {args.file}: {e}") from None
    else:
        if args.file:
            try:
                with open(args.file, encoding="utf-8") as fh:
                    script = fh.read()
            except OSError as e:
                raise ConfigError(f"-f {args.file}: {e.strerror}") from None
        else:
            script = args.sql
        spark = _session(cfg)
    result = api.sql(spark, config=cfg, script=script, model=args.model, name=args.name)
    sql.show(spark, result, output=args.output, rows=args.rows)
    return 0


def cmd_serve_sql(cfg, args) -> int:
    from tfos_jobs.jobs.serve import sql_server

    secrets = sql_server.read_secrets(cfg.serve_sql)  # a missing password stops before Spark starts
    spark = _session(cfg, sql_server.session_conf(cfg.serve_sql, cfg.spark.conf))
    sql_server.serve(spark, cfg, secrets, reload=lambda: config_mod.load(args.config, args.loaded_overrides),
                     log=lambda line: print(line, flush=True))
    return 0


def cmd_demo(cfg, args) -> int:
    from tfos_jobs.demos import pipeline

    return pipeline.run(cfg, lambda: _session(cfg))


def cmd_sources(cfg, args) -> int:
    from tfos_jobs.jobs.prepare import source_report

    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    report = source_report.run(_session(cfg), cfg, args.only, count=args.count, log=log)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 2


def cmd_demo_warehouse(cfg, args) -> int:
    from tfos_jobs.demos import warehouse as warehouse_demo

    return warehouse_demo.run(cfg, lambda: _session(cfg))


def cmd_sweep(cfg, args) -> int:
    from tfos_jobs import api
    from tfos_jobs.search import space

    definition = space.load(args.space, args.space_overrides, args.config, args.base_overrides)
    space.check_models(args.config, args.base_overrides, definition)  # every model the trials build, before Spark
    # Trials are one-task jobs: the driver's own trial and epoch lines replace Spark's console bar.
    quiet = {**cfg.spark.conf, "spark.ui.showConsoleProgress": "false"}
    cfg = dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, conf=quiet))
    outcome = api.sweep(_session(cfg), config=args.config, space=definition, overrides=args.base_overrides)
    return 0 if outcome.best is not None else 1


def cmd_stream(cfg, args) -> int:
    from tfos_jobs import api
    from tfos_jobs.session_builder import with_kafka_connector

    if args.model:
        cfg = dataclasses.replace(cfg, stream=dataclasses.replace(cfg.stream, model=args.model))
    cfg = dataclasses.replace(cfg, spark=with_kafka_connector(cfg.spark))
    api.stream(_session(cfg), config=cfg, log=lambda line: print(line, flush=True))
    return 0


def cmd_replay(cfg, args) -> int:
    from tfos_jobs import api
    from tfos_jobs.jobs.stream.driver.replay import source_rows

    spark = _session(cfg)
    rows = source_rows(spark, cfg, args.source, args.where)
    order = cfg.features.time.name if cfg.features.is_sequence else None
    api.replay(spark, rows=rows, bootstrap_servers=cfg.stream.bootstrap_servers, topic=args.topic or cfg.stream.topic,
               rate=args.rate, key=cfg.features.key.name if cfg.features.key else None, order_by=order,
               disorder=args.disorder, partitions=args.partitions)
    return 0


def cmd_demo_stream(cfg, args) -> int:
    from tfos_jobs.demos import stream as demo
    from tfos_jobs.session_builder import with_kafka_connector

    cfg = dataclasses.replace(cfg, spark=with_kafka_connector(cfg.spark))
    return demo.run(cfg, lambda: _session(cfg))


COMMANDS = {"sweep": cmd_sweep, "generate": cmd_generate, "prepare": cmd_prepare, "train": cmd_train, "predict": cmd_predict,
            "sql": cmd_sql, "serve-sql": cmd_serve_sql, "demo": cmd_demo, "evaluate": cmd_evaluate, "sources": cmd_sources,
            "demo-warehouse": cmd_demo_warehouse, "stream": cmd_stream, "replay": cmd_replay,
            "demo-stream": cmd_demo_stream}

if __name__ == "__main__":
    sys.exit(main())
