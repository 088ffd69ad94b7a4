"""A node launcher for the tests: the product's `guard`, except that the node of task 1 holds
a secret other than the run's. Executors import it (PYTHONPATH points at the repository)."""
from __future__ import annotations

from tfos_jobs.executor import node

REAL_GUARD = node.guard


def guard(node_fn, run_dir: str, strategy: str, secret: bytes, tf_ports: list[int], nodes: int):
    good = REAL_GUARD(node_fn, run_dir, strategy, secret, tf_ports, nodes)
    bad = REAL_GUARD(node_fn, run_dir, strategy, bytes(len(secret)), tf_ports, nodes)

    def run_node(iterator):
        from pyspark import TaskContext

        return (bad if TaskContext.get().partitionId() == 1 else good)(iterator)

    return run_node


def main(argv: list[str]) -> int:
    from tfos_jobs import cli

    node.guard = guard
    return cli.main(argv)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
