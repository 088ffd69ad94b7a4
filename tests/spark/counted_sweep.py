"""`tfos sweep ARGS` in this process, its trials' nodes played by threads under the real supervisor
(`tests.unit.test_sweep_launcher`), counting the config files it reads and the models it checks;
prints them as JSON on its last line. Run as `python -m tests.spark.counted_sweep ARGS`."""
from __future__ import annotations

import collections
import json
import sys

from tfos_jobs import cli
from tfos_jobs.config import loading
from tfos_jobs.config import sweep as sweep_file
from tfos_jobs.jobs.sweep.driver import job
from tfos_jobs.model import builder

from tests.unit.test_sweep_launcher import TrialLauncher, lone_trial


def main(argv: list[str]) -> int:
    reads: collections.Counter[str] = collections.Counter()
    checks: collections.Counter[str] = collections.Counter()
    read_toml, check_build = loading.read_toml, builder.check_build

    def counted_read(path, what):
        reads[str(path)] += 1
        return read_toml(path, what)

    def counted_check(*, model_cfg, spec, build=None):
        checks[repr(model_cfg)] += 1
        return check_build(model_cfg=model_cfg, spec=spec, build=build)

    loading.read_toml = sweep_file.read_toml = counted_read
    builder.check_build = counted_check
    launcher = TrialLauncher(lone_trial({n: [0.7, 0.8, 0.9] for n in range(1, 100)}), lone=True)
    job.default_launcher = lambda spark, pruning: lambda lone: launcher
    code = cli.main(argv)
    print(json.dumps({"code": code, "reads": reads, "checks": checks, "trials": len(launcher.launched)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
