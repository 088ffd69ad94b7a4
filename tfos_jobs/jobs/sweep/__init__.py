"""The sweep job: many trainings (trials) in parallel as Spark tasks, one results table.

  driver/    ask the study for trials, launch and watch them, prune, keep the sweep directory, report;
             each trial is a training run whose nodes the launcher starts (tfos_jobs.cluster)
"""
