"""A TF cluster on Spark's executors, shared by training and sweeps:

  driver/  the launcher seam (`launcher`): one attempt at a time, in this process (`local`) or as
           TF nodes on the executors (`tf_cluster`, through TensorFlowOnSpark), watched by one
           supervisor (`supervise`: reservations, node errors, lost workers, hangs); the control
           server the nodes report to, the run's state and what each node is sent
  node/    what runs in a node's Python worker: its inputs, its role, Keras training, what it
           reports and publishes
"""
