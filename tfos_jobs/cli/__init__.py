"""`tfos`: the command line, a client of the Python API (`tfos_jobs.api`). Every command loads and
validates its config before Spark starts; `tfos submit`, `pack-env` and `connect-server` hand
over to deploy/, and `tfos bench` to the bench of the source checkout.

parser     the commands and their options (the config's options the bench shares)
commands   a function per command that reads a config: the API called, the exit code returned
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

from tfos_jobs import config as config_mod
from tfos_jobs.cli.parser import parser
from tfos_jobs.errors import TfosError

CHECKOUT = Path(__file__).resolve().parents[2]  # the source checkout, when the package runs from one


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["submit"]:  # spark-submit's options are not ours to parse
        return _submit(argv[1:])
    if argv[:1] == ["bench"]:  # nor are the bench's, which lives outside the package
        return bench(argv[1:])
    args = parser().parse_args(argv)
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
        if args.command == "serve-sql":
            overrides += [f"serve_sql.{k}={json.dumps(v)}" for k in ("port", "bind") if (v := getattr(args, k)) is not None]
        args.loaded_overrides = overrides
        config = config_mod.load(args.config, overrides)
        if args.command == "config":
            print(json.dumps(config_mod.to_dict(config), indent=2))
            return 0
        from tfos_jobs.cli.commands import COMMANDS

        return COMMANDS[args.command](config, args)
    except TfosError as e:
        print(f"tfos {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        _stop_session()


def _submit(argv: list[str]) -> int:
    from tfos_jobs.cli.commands import COMMANDS
    from tfos_jobs.deploy import submit

    try:
        return submit.run(argv, sorted(COMMANDS))
    except TfosError as e:
        print(f"tfos submit: error: {e}", file=sys.stderr)
        return 2


BENCH_MISSING = ("tfos bench: error: the benchmarks are not part of the installed package: they live in the "
                 "source repository (benchmarks/; run them there with `make bench` or `python -m benchmarks`)")
# The bench's own entry, named `tfos bench` in its usage, errors and report.
BENCH_MAIN = "import sys; from benchmarks.cli import main; sys.exit(main(prog='tfos bench'))"


def bench(argv: list[str], checkout: Path = CHECKOUT) -> int:
    """`tfos bench ARGS`: the bench of the source checkout the package runs from, in a fresh interpreter that takes this
    process's place (its signals, its exit code): the package never imports the bench, which imports the package."""
    if not (checkout / "benchmarks" / "cli.py").is_file():
        print(BENCH_MISSING, file=sys.stderr)
        return 2
    path = os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH", "")) if p)
    sys.stdout.flush()
    # -P: the checkout's benchmarks (and package), never a folder of that name where the command runs
    os.execve(sys.executable, [sys.executable, "-P", "-c", BENCH_MAIN, *argv], {**os.environ, "PYTHONPATH": path})


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
    if "pyspark" not in sys.modules:  # no session was started
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
