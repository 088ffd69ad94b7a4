"""The four jobs, one folder each, split by where the code runs:

  prepare/   raw tables -> a dataset of TFRecords (driver; the executors' work is Spark's)
  train/     a dataset -> a model, on a TF cluster started on the executors (driver/; the
             cluster and the nodes' side are tfos_jobs.cluster)
  serve/     a model -> predictions: `tfos predict`, `tfos sql`, `tfos evaluate` (driver; the
             executor side is the prediction UDF in `udfs/`)
  sweep/     many trainings in parallel as Spark tasks (driver/, executor/), on tfos_jobs.cluster
"""
