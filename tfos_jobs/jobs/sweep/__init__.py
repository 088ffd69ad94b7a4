"""The sweep job: many trainings (trials) in parallel as Spark tasks, one results table.

  driver/    propose trials, launch and watch them, keep the sweep directory, report
  executor/  a single-process trial's task
"""
