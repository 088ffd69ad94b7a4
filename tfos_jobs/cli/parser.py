"""The `tfos` commands and their options; `common_arguments`, the options of every command that
reads a config, are the bench's too (benchmarks/arguments.py)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tfos_jobs import resources
from tfos_jobs.config.spark import LOG_LEVEL


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


def parser() -> argparse.ArgumentParser:
    """The `tfos` commands and their options (`tfos submit` and `tfos bench` take theirs as they are)."""
    common = common_arguments()
    result = argparse.ArgumentParser(prog="tfos", description="Distributed TensorFlow on Apache Spark.")
    sub = result.add_subparsers(dest="command", required=True)
    _job_commands(sub, common)
    _stream_commands(sub, common)
    _service_commands(sub, common)
    return result


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
                        help="an autoencoder's window scores against known anomaly intervals: ROC AUC, AUPRC, "
                             "VUS-PR and VUS-ROC beside plain baselines, alerts and plots")
    ev.add_argument("--truth", help="table (Parquet) of anomaly intervals: key, start, end, kind "
                                    "(default: the embedded fleet's, under fleet.output)")
    ev.add_argument("--scores", help="scores written by tfos predict (default: predict.output)")
    base = sub.add_parser("baseline", parents=[common],
                          help="a classifier's predictions beside a Spark ML bag-of-words logistic regression and the "
                               "majority class on the same rows: accuracy and macro F1 on eval and test")
    base.add_argument("--predictions", help="predictions written by tfos predict (default: predict.output)")
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
