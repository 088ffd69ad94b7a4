"""`tfos submit`: spark-submit with what every job needs, from the installed package.

    tfos submit [spark-submit options] JOB [job options]
    tfos submit --master yarn --deploy-mode cluster --env-archive hdfs:///envs/tfos-env.tar.gz \\
        --num-executors 2 train --config census --set train.model_dir=hdfs:///models/census

JOB is a `tfos` command (prepare, train, predict, sweep, sql, ...) or a Python file. Added to
the spark-submit command line:
- the TFRecord data source jar of this installation (`--jars`, merged with the user's);
- with `--env-archive A`: `--archives A#tfos-env` and executors (and in cluster mode the
  driver) on `./tfos-env/bin/python` (`tfos pack-env` makes the archive; `A#name` unpacks it
  as `./name` instead);
- for `train` and `sweep` with a model of your own ("module:function") that this process
  imports from its own files, the module's `.py` file or its package zipped (`tfos_jobs.user_code`)
  in `--py-files`, merged with the user's: executors and, in cluster mode, the driver import it;
- on YARN, unless given: `spark.yarn.maxAppAttempts=1` (a failed run is resumed by the
  package's own attempts from its model directory, and rerunning a whole driver would only
  repeat the failure), and in cluster mode the driver's environment for TensorFlowOnSpark;
- on Kubernetes (`k8s://`), what `tfos_jobs.deploy.kubernetes` sets and checks: the image's jar, job
  script and Python, executors for every TF node, memory for TensorFlow beside the heap; and in
  cluster mode the driver pod followed to its end, its failure as the exit code with its last lines.

`--dry-run` (before JOB) prints the command instead of running it.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tfos_jobs import user_code
from tfos_jobs.deploy import kubernetes
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.session_builder import FIXED_ENV, tfrecord_jar
from tfos_jobs.tasks import ModelKind

ENV_LINK = "tfos-env"  # the directory the archive unpacks as in every container, unless given (A#name)
JOB_SCRIPT = Path(__file__).parent.parent / "entrypoints" / "job.py"
# spark-submit options that take no value; every other `--option` takes one
FLAGS = frozenset({"--verbose", "-v", "--supervise", "--help", "-h", "--version", "--kill", "--status"})


@dataclass
class Submission:
    options: list[str]  # spark-submit's, in the order given
    app: str  # the job's script
    app_args: list[str]
    env_archive: str | None = None
    dry_run: bool = False
    conf: dict[str, str] = field(default_factory=dict)  # --conf k=v given by the user

    def option(self, name: str) -> str | None:
        """The last value given for `--name` (spark-submit's rule: a later one wins)."""
        value = None
        for i, arg in enumerate(self.options):
            if arg == name and i + 1 < len(self.options):
                value = self.options[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
        return value


def parse(argv: Sequence[str], commands: Sequence[str]) -> Submission:
    """Split `tfos submit` arguments into spark-submit's, the job and the job's own."""
    argv = list(argv)
    options: list[str] = []
    env_archive, dry_run = None, False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--env-archive" or arg.startswith("--env-archive="):
            if "=" in arg:
                env_archive = arg.split("=", 1)[1]
            elif i + 1 < len(argv):
                env_archive, i = argv[i + 1], i + 1
            else:
                raise ConfigError("--env-archive needs a value: the archive `tfos pack-env` wrote")
        elif arg == "--dry-run":
            dry_run = True
        elif arg.startswith("-"):
            options.append(arg)
            if arg not in FLAGS and "=" not in arg:
                if i + 1 >= len(argv):
                    raise ConfigError(f"spark-submit option {arg} needs a value")
                options.append(argv[i + 1])
                i += 1
        else:
            if arg in commands:
                app, app_args = str(JOB_SCRIPT), [arg, *argv[i + 1:]]
            elif arg.endswith(".py"):
                app, app_args = arg, argv[i + 1:]
            else:
                raise ConfigError(f"{arg!r} is neither a job ({', '.join(commands)}) nor a .py file")
            return Submission(options, app, app_args, env_archive, dry_run, _confs(options))
        i += 1
    raise ConfigError(f"no job given; name one of {', '.join(commands)} after spark-submit's options")


def _confs(options: list[str]) -> dict[str, str]:
    conf = {}
    for i, arg in enumerate(options):
        setting = options[i + 1] if arg in ("--conf", "-c") and i + 1 < len(options) else arg.removeprefix("--conf=")
        if (arg in ("--conf", "-c") or arg.startswith("--conf=")) and "=" in setting:
            key, value = setting.split("=", 1)
            conf[key] = value
    return conf


def command(sub: Submission) -> list[str]:
    """The spark-submit command line for `sub`."""
    options = _without(sub.options, "--jars")
    conf = all_conf(sub)
    master = master_of(sub)
    cluster_mode = deploy_mode(sub) == "cluster"
    on_kubernetes = kubernetes.is_kubernetes(master)
    job = sub.app_args[0] if sub.app == str(JOB_SCRIPT) else None
    # On Kubernetes in cluster mode the driver pod has the image's copy of the jar and job script.
    pod_driver = on_kubernetes and cluster_mode
    jars = [kubernetes.IMAGE_TFRECORD_JAR if pod_driver else str(tfrecord_jar()), *_split(sub.option("--jars"))]
    app = kubernetes.IMAGE_JOB_SCRIPT if pod_driver and job else sub.app
    extra = ["--jars", ",".join(dict.fromkeys(jars))]
    if sub.env_archive:
        archive = sub.env_archive if "#" in sub.env_archive else f"{sub.env_archive}#{ENV_LINK}"
        python = f"./{archive.rsplit('#', 1)[1]}/bin/python"  # in every container's working directory
        options = _without(options, "--archives")
        extra += ["--archives", ",".join([*_split(sub.option("--archives")), archive])]
        extra += _conf(sub, "spark.pyspark.python", python)
        if cluster_mode:
            extra += _conf(sub, "spark.yarn.appMasterEnv.PYSPARK_PYTHON", python)
        else:
            extra += _conf(sub, "spark.pyspark.driver.python", sys.executable)
    py_files = _split(sub.option("--py-files"))
    if job:
        py_files += user_code.files_for(model_kinds(sub.app_args))
    if py_files:
        options = _without(options, "--py-files")
        extra += ["--py-files", ",".join(dict.fromkeys(py_files))]
    if on_kubernetes:
        local = [f for f in [*jars[1:], *py_files, *([] if job else [app])] if _is_local(f)]
        executors = {kubernetes.EXECUTORS: n} if (n := sub.option("--num-executors")) else {}
        extra += kubernetes.settings(conf={**conf, **executors}, cluster_mode=cluster_mode, job=job, local_files=local,
                                     nodes=train_nodes(sub.app_args) if job == "train" else None,
                                     image_python=not sub.env_archive)
    if master.startswith("yarn"):
        extra += _conf(sub, "spark.yarn.maxAppAttempts", "1")
        if cluster_mode:
            for key, value in FIXED_ENV.items():  # before the driver's Python starts
                extra += _conf(sub, f"spark.yarn.appMasterEnv.{key}", value)
    if sub.option("--name") is None and job:
        extra += ["--name", f"tfos {job}"]
    return [spark_submit(), *extra, *options, app, *sub.app_args]


def master_of(sub: Submission) -> str:
    return sub.option("--master") or all_conf(sub).get("spark.master", "")


def all_conf(sub: Submission) -> dict[str, str]:
    """The settings given on the command line and in a local --properties-file (the command line wins)."""
    return {**kubernetes.read_properties(sub.option("--properties-file")), **sub.conf}


def deploy_mode(sub: Submission) -> str:
    return sub.option("--deploy-mode") or all_conf(sub).get("spark.submit.deployMode", "client")


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def train_nodes(app_args: Sequence[str]) -> int | None:
    """The TF nodes a `train` job starts, from its --config and --set; None when they cannot be read here."""
    from tfos_jobs import config as config_mod
    from tfos_jobs import resources

    args, _ = _job_parser().parse_known_args(list(app_args[1:]))
    if not args.config or config_mod.is_url(args.config):
        return None
    try:
        return config_mod.load(resources.config_path(args.config), args.overrides).train.nodes()
    except TfosError:  # the job itself reports a config it cannot read
        return None


def _job_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config")
    parser.add_argument("--space")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    return parser


def model_kinds(app_args: Sequence[str]) -> list[str]:
    """The `train.model.kind`s a `train` or `sweep` job builds, and its `train.fn`, from its `--config` and `--set`
    (and a sweep's `--space`), as far as they are files on this machine."""
    from tfos_jobs import config as config_mod
    from tfos_jobs import resources
    from tfos_jobs.config import sweep as sweep_config
    from tfos_jobs.search import space

    if not app_args or app_args[0] not in ("train", "sweep"):
        return []
    args, _ = _job_parser().parse_known_args(list(app_args[1:]))
    raw: dict = {}
    try:
        if args.config and not config_mod.is_url(args.config):
            raw = config_mod.read_config_file(resources.config_path(args.config))
        for item in args.overrides:
            if item.startswith("train."):
                config_mod.apply_override(raw, item)
    except TfosError:  # the job itself reports a config it cannot read
        pass
    train = raw.get("train", {}) if isinstance(raw.get("train"), dict) else {}
    model = train.get("model", {})
    kind = model.get("kind", ModelKind.WIDE_DEEP.value) if isinstance(model, dict) else ModelKind.WIDE_DEEP.value
    own = [str(train["fn"])] if train.get("fn") else []  # a training function's module ships as a model's does
    if app_args[0] != "sweep" or not args.space or config_mod.is_url(args.space):
        return [str(kind), *own]
    try:
        sweep = sweep_config.load(resources.config_path(args.space), [o for o in args.overrides if o.startswith(("sweep.", "params."))])
    except TfosError:
        return [str(kind), *own]
    return [*space.model_kinds(sweep, str(kind)), *own]


def _conf(sub: Submission, key: str, value: str) -> list[str]:
    return [] if key in sub.conf else ["--conf", f"{key}={value}"]


def _split(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def _without(options: list[str], name: str) -> list[str]:
    out, skip = [], False
    for arg in options:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out


def spark_submit() -> str:
    """This installation's spark-submit (pyspark's, beside this Python), else the one on PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if not found:
        raise ConfigError("no spark-submit beside this Python or on PATH: install pyspark or set PATH")
    return found


def run(argv: Sequence[str], commands: Sequence[str]) -> int:
    sub = parse(argv, commands)
    cmd = command(sub)
    if sub.dry_run:
        print(shlex.join(cmd))
        return 0
    # spark-submit finds Spark through this Python's pyspark; the jobs' Python is spark.pyspark.python's
    env = {"PYSPARK_PYTHON": sys.executable, **os.environ, **FIXED_ENV}
    sys.stdout.flush()
    if kubernetes.is_kubernetes(master_of(sub)) and deploy_mode(sub) == "cluster":
        return kubernetes.follow(cmd, env, all_conf(sub), master_of(sub))
    os.execve(cmd[0], cmd, env)
    return 0  # not reached
