"""Errors a user can act on. The CLI prints their message and exits non-zero, without a traceback."""


class TfosError(Exception):
    """Base class: the message names the setting, column, file or directory at fault."""


class ConfigError(TfosError):
    """A configuration key or value is wrong."""


class InputError(TfosError):
    """Input data does not match the feature spec (missing column, wrong type, empty table)."""


class OutputExistsError(TfosError):
    """An output directory exists and overwriting was not asked for."""


class TrainingError(TfosError):
    """Training failed; the message carries the failing node's own error.

    `retriable`: the failure came from the cluster (a lost executor, a broken connection, a
    hang), not from the model or the data, so a relaunch can resume the run."""

    def __init__(self, message: str, retriable: bool = False):
        super().__init__(message)
        self.retriable = retriable


class Resize(TrainingError):
    """Elastic training (`train.elastic`): the attempt ends so that the next one runs with `workers` workers (`cause`:
    contracts.metrics.SHRINK or GROW). Not a failure: it does not count against `train.max_attempts`."""

    def __init__(self, message: str, workers: int, cause: str):
        super().__init__(message, retriable=True)
        self.workers, self.cause = workers, cause


class Pruned(TrainingError):
    """A sweep's pruner stopped the run after an epoch: it ended well, without a model."""
