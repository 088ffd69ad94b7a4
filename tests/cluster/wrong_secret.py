"""A node launcher for the tests: the product's `guard`, except that the node of task 1 holds
a secret other than the run's. Executors import it (PYTHONPATH points at the repository)."""
from __future__ import annotations

from tfos_jobs.cluster.node import node

REAL_GUARD = node.guard


def guard(node_fn, launch, secret: bytes):
    good = REAL_GUARD(node_fn, launch, secret)
    bad = REAL_GUARD(node_fn, launch, bytes(len(secret)))

    def run_node(partition, records):
        return (bad if partition == 1 else good)(partition, records)

    return run_node


def main(argv: list[str]) -> int:
    from tfos_jobs import cli

    node.guard = guard
    return cli.main(argv)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
