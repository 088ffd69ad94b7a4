"""The entry of `tfos bench`: generate data, measure, write the report (its arguments: bench.arguments)."""
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
from tfos_jobs.bench.arguments import DEFAULT_OUTPUT
from tfos_jobs.bench.sizes import FULL, SMOKE
from tfos_jobs.bench.context import Bench, cleanup
from tfos_jobs.bench.run import run_all
from tfos_jobs.config import Config
from tfos_jobs.tf_import import tensorflow

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
