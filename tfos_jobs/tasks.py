"""What a model predicts (its task) and the models the package builds itself (model kinds).

The label's task decides the output layer, the loss, the metrics, the serving outputs and the
SQL function's return type; sensor windows have no label, and their model reconstructs them
(`AUTOENCODER`). Every module compares with these names instead of typing them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tfos_jobs.names import Name


class Task(Name):
    BINARY = "binary"  # P(positive) and the class: a label with two values
    MULTICLASS = "multiclass"  # one probability per class
    REGRESSION = "regression"  # a number
    AUTOENCODER = "autoencoder"  # sensor windows: reconstruction error, latent vector, anomaly flag


LABEL_TASKS = (Task.BINARY.value, Task.MULTICLASS.value, Task.REGRESSION.value)  # `kind = "label"`'s `task`
if TYPE_CHECKING:  # a type checker reads the setting as str; the spec's loader checks its value
    LabelTask = str
else:
    LabelTask = Literal[LABEL_TASKS]


class ModelKind(Name):
    """`train.model.kind` values the package builds (besides a user's "module:function")."""

    WIDE_DEEP = "wide_deep"  # rows: the spec's features, wide (crosses) and deep (embeddings, dense layers)
    SEQUENCE_AUTOENCODER = "sequence_autoencoder"  # sensor windows: a recurrent autoencoder
