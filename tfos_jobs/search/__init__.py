"""Hyperparameter search: the sweep file, samplers and the early-stopping rule (no Spark, no TF)."""
