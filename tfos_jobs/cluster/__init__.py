"""TF nodes on Spark's executors, shared by training and sweeps:

  driver/  the launcher seam (`launcher`): one attempt at a time, in this process (`local`) or as
           TF nodes on the executors (`node_job`: one DataFrame job, a task per node), watched by
           one supervisor (`supervise`: reservations, node errors, lost workers, hangs); the
           control server the nodes report to (or its relay through the driver, for a Spark
           Connect client), the run's state and what each node is sent
  node/    what runs on an executor: the node's task (its input files), the node's own process
           (TensorFlowOnSpark's runtime, or a node alone), its role, Keras training, what it
           reports and publishes
"""
