"""The five jobs, one folder each, split by where the code runs:

  prepare/   raw tables -> a dataset of TFRecords (driver; the executors' work is Spark's)
  train/     a dataset -> a model, here (`local`) or on TF nodes on the executors (tfos_jobs.cluster)
  serve/     a model -> predictions: `tfos predict`, `tfos sql`, `tfos evaluate`, `tfos serve-sql`
             (driver; the executor side is the prediction UDF in `udfs/`)
  stream/    a Kafka topic -> predictions as events arrive (driver/, executor/)
  sweep/     many trainings in parallel, each a training run on tfos_jobs.cluster (driver/)
"""
