"""The entry of `tfos bench` and `python -m benchmarks`: parse the arguments (benchmarks.arguments),
load the config, generate data, measure, write the report."""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import shlex
import sys
import tempfile
import time
from typing import Sequence

from benchmarks.arguments import DEFAULT_OUTPUT, parser
from benchmarks.sizes import FULL, SMOKE
from tfos_jobs import config as config_mod
from tfos_jobs.config import Config
from tfos_jobs.errors import TfosError


def main(argv: Sequence[str] | None = None, prog: str = "tfos bench") -> int:
    """Run the bench on `argv` (the arguments after `tfos bench`); `prog` names the command in
    usage, errors and the report."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser(prog).parse_args(argv)
    overrides = list(args.overrides)
    if args.people is not None:
        overrides.append(f"synthetic.people={args.people}")
    try:
        cfg = config_mod.load(args.config, overrides)
        return run(cfg, args, command=" ".join([prog, *map(shlex.quote, argv)]))
    except TfosError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    finally:
        _stop_session()


def run(cfg: Config, args: argparse.Namespace, command: str = "tfos bench") -> int:
    from benchmarks import machine, records, report
    from benchmarks.context import Bench, cleanup
    from benchmarks.run import run_all
    from tfos_jobs.tf_import import tensorflow

    sizes = SMOKE if args.smoke else FULL
    if args.people:
        sizes = dataclasses.replace(sizes, people=args.people)
    if args.p14_people:
        sizes = dataclasses.replace(sizes, p14_people=args.p14_people)
    if args.p15_rate:
        sizes = dataclasses.replace(sizes, p15_rate=args.p15_rate)
    if args.repeats:
        sizes = dataclasses.replace(sizes, repeats=args.repeats, train_repeats=args.repeats)
    output = args.output or (os.path.join(tempfile.gettempdir(), "tfos-bench-smoke.md") if args.smoke
                             else report.record_of(args.only) if args.only else DEFAULT_OUTPUT)
    work = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="tfos-bench-")
    os.makedirs(work, exist_ok=True)
    started, load_start = time.time(), machine.load_average()
    date = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print(f"tfos bench: {'smoke' if args.smoke else 'full'} run, work directory {work}, report {output}", flush=True)
    tensorflow()  # its in-process baselines run TensorFlow here: imported without the start-up noise
    bench = Bench(cfg, sizes, work, lambda text: print(text, flush=True),
                  spark_master=args.spark_master, tfos_master=args.tfos_master, p14_master=args.p14_master,
                  remote=args.remote)
    try:
        result = run_all(bench, only=args.only)
    finally:
        if not args.workdir:
            cleanup(work)
    written = report.write(output, result, machine.describe(), command=command, date=date,
                           wall_seconds=time.time() - started, load=(load_start, machine.load_average()),
                           only=args.only)
    if args.only and not args.output and os.path.exists(DEFAULT_OUTPUT):  # the whole report carries the record
        records.refresh(DEFAULT_OUTPUT)
        written.append(DEFAULT_OUTPUT)
    print(f"tfos bench: {time.time() - started:.0f} s; wrote {', '.join(written)}")
    for r in result.results:
        print(f"  {r.id:<4} {r.value:10.3g}  goal {r.goal_op} {r.goal:g}  {'met' if r.met else 'NOT MET'}")
    return 0


def _stop_session() -> None:
    """Stop Spark before the interpreter exits: local-cluster masters otherwise keep relaunching
    executors while the JVM shuts down."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
