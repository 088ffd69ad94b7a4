"""Errors a user can act on. The CLI prints their message and exits non-zero, without a traceback."""


class TfosError(Exception):
    """Base class: the message names the setting, column, file or directory at fault."""


class ConfigError(TfosError):
    """A configuration key or value is wrong."""


class InputError(TfosError):
    """Input data does not match the feature spec (missing column, wrong type, empty table)."""


class OutputExistsError(TfosError):
    """An output directory exists and overwriting was not asked for."""
