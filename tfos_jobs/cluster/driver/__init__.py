"""The driver side of a TF cluster: launch, supervise, answer the nodes."""
