"""Arguments and entry of `tfos bench`: generate data, measure, write the report."""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import shlex
import sys
import tempfile
import time

from tfos_jobs.bench import machine, report
from tfos_jobs.bench.sizes import FULL, SMOKE
from tfos_jobs.bench.context import Bench, cleanup
from tfos_jobs.bench.run import run_all
from tfos_jobs.config import Config
from tfos_jobs.tf_import import tensorflow

DEFAULT_OUTPUT = "docs/benchmarks.md"
SPARK_MASTER = "local[2]"  # P4 is defined on local[2]
TFOS_MASTER = "local-cluster[4,1,1536]"  # TFoS: one executor per TF node (PS: chief + 2 workers + 1 ps)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks the harness only")
    parser.add_argument("--output", help=f"the report (default {DEFAULT_OUTPUT}; with --smoke, one in the temp "
                                         "directory); its plots go to the directory of the same name")
    parser.add_argument("--people", type=int, help=f"people at 1x (default {FULL.people:,}; 16x is 16 times that)")
    parser.add_argument("--repeats", type=int, help=f"repeats per figure (default {FULL.repeats}, training {FULL.train_repeats})")
    parser.add_argument("--workdir", help="where the generated data, datasets and models go, kept afterwards "
                                          "(default: a new temporary directory, deleted at the end)")
    parser.add_argument("--spark-master", default=SPARK_MASTER,
                        help=f"master for prepare, writes and SQL (default {SPARK_MASTER})")
    parser.add_argument("--remote", metavar="URL",
                        help="a directory on a Hadoop filesystem the session reaches (hdfs://, s3a://, ...) for P11: "
                             "training with the dataset there vs on local files, and the model fetch from there; "
                             "without it P11 is not measured (make bench starts a local HDFS for it)")
    parser.add_argument("--tfos-master", default=TFOS_MASTER,
                        help=f"master for the TFoS training runs, one executor per TF node (default {TFOS_MASTER})")


def run(cfg: Config, args: argparse.Namespace) -> int:
    sizes = SMOKE if args.smoke else FULL
    if args.people:
        sizes = dataclasses.replace(sizes, people=args.people)
    if args.repeats:
        sizes = dataclasses.replace(sizes, repeats=args.repeats, train_repeats=args.repeats)
    output = args.output or (os.path.join(tempfile.gettempdir(), "tfos-bench-smoke.md") if args.smoke
                             else DEFAULT_OUTPUT)
    work = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="tfos-bench-")
    os.makedirs(work, exist_ok=True)
    started, load_start = time.time(), machine.load_average()
    date = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print(f"tfos bench: {'smoke' if args.smoke else 'full'} run, work directory {work}, report {output}", flush=True)
    tensorflow()  # its in-process baselines run TensorFlow here: imported without the start-up noise
    bench = Bench(cfg, sizes, work, lambda text: print(text, flush=True),
                  spark_master=args.spark_master, tfos_master=args.tfos_master, remote=args.remote)
    try:
        result = run_all(bench)
    finally:
        if not args.workdir:
            cleanup(work)
    command = "tfos " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["bench"] else "tfos bench"
    written = report.write(output, result, machine.describe(), command=command, date=date,
                           wall_seconds=time.time() - started, load=(load_start, machine.load_average()))
    print(f"tfos bench: {time.time() - started:.0f} s; wrote {', '.join(written)}")
    for r in result.results:
        print(f"  {r.id:<4} {r.value:10.3g}  goal {r.goal_op} {r.goal:g}  {'met' if r.met else 'NOT MET'}")
    return 0
