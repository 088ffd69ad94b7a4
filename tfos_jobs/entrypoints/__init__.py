"""spark-submit's entry points: a Python file per job for `spark-submit <file> --config ...`
(job.py takes the `tfos` command first: `spark-submit tfos_jobs/entrypoints/job.py train --config ...`,
what `tfos submit` builds). Each hands its arguments to `tfos_jobs.cli`."""
