"""The sweep job: many trainings (trials) in parallel as Spark tasks, one results table.

  driver/    ask the study for trials, launch and watch them, prune, keep the sweep directory, report
  executor/  a single-process trial's task
"""
