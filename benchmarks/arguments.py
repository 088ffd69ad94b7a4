"""The bench's arguments: `tfos bench` hands its own through untouched. Kept apart from the bench
itself so that `--help` and a wrong option answer before the stages (MLflow, TensorFlow) load."""
from __future__ import annotations

import argparse

from benchmarks import ROOT
from benchmarks.sizes import FULL
from tfos_jobs.cli.parser import common_arguments

DEFAULT_OUTPUT = str(ROOT / "docs" / "benchmarks.md")  # in the repository, wherever the bench runs from
SPARK_MASTER = "local[2]"  # P4 is defined on local[2]
TFOS_MASTER = "local-cluster[4,1,1536]"  # TFoS: one executor per TF node (PS: chief + 2 workers + 1 ps)
P14_MASTER = "local-cluster[2,1,4096]"  # P14: two executors, one per TF node, holding 100x the people's joins
# Stages that need nothing of the others and can run alone (P6: training and scaling, P3 P6 P7 P8).
ONLY = ("P4j", "P6", "P14", "P15", "P16", "P17", "P18", "P19")


def parser(prog: str = "tfos bench") -> argparse.ArgumentParser:
    """The bench's whole parser: the config options every `tfos` command takes, then its own."""
    result = argparse.ArgumentParser(prog=prog, parents=[common_arguments()],
                                     description="Measure every stage against its baseline in the same run; "
                                                 "write the report and its plots.")
    add_arguments(result)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks the harness only")
    parser.add_argument("--output", help="the report (default docs/benchmarks.md in the repository; with --smoke, "
                                         "one in the temp directory); its plots go to the directory of the same name")
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
    parser.add_argument("--p14-people", type=int, metavar="N",
                        help=f"P14's 1x people; its other side has 100 times as many (default {FULL.p14_people:,}; "
                             "100000 gives the full 10,000,000)")
    parser.add_argument("--p14-master", default=P14_MASTER,
                        help=f"master for P14: two executors, one per TF node (default {P14_MASTER})")
    parser.add_argument("--p15-rate", type=float, metavar="EVENTS",
                        help=f"P15's events per second produced while tfos stream runs (default {FULL.p15_rate:,.0f})")
    parser.add_argument("--only", choices=ONLY, help="run this stage alone (its report then holds only its figures)")
