"""Hyperparameter search: the sweep file, Optuna's samplers, pruners and study, trial results (no Spark, no TF)."""
