"""A node launcher for the tests: the product's node task, except that the node of task 1 holds
a secret other than the run's. Executors import it (PYTHONPATH points at the repository)."""
from __future__ import annotations

import functools

from tfos_jobs.cluster.driver import node_job


def run_node(launch, secret: bytes, batches):
    from pyspark import TaskContext

    from tfos_jobs.cluster.node.task import run_node as product_run_node

    partition = TaskContext.get().partitionId()
    return product_run_node(launch, bytes(len(secret)) if partition == 1 else secret, batches)


def node_function(launch, secret: bytes):
    return functools.partial(run_node, launch, secret)


def main(argv: list[str]) -> int:
    from tfos_jobs import cli

    node_job.node_function = node_function
    return cli.main(argv)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
