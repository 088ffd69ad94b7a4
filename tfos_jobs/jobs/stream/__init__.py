"""The stream job: a Kafka topic scored with the prediction function as events arrive.

  driver/    events parsed, the streaming query, each micro-batch's scoring and sinks, progress,
             `tfos replay` (`tfos demo-stream` is tfos_jobs.demos.stream)
  executor/  sensor windows kept per asset in Spark's state
"""
