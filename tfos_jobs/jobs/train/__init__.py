"""The train job: a dataset -> a SavedModel, trained by a TF cluster started on the executors.

  driver/    the job (attempts, the model directory), the TF cluster's launch and watch, the
             control server nodes report to, what each node is sent
  executor/  the node: its inputs, its role, Keras training, what it reports and publishes
"""
