"""Filesystem failures in a user's words: what a Java or Python error means, and the path or setting it concerns."""
from __future__ import annotations

import contextlib
from typing import Iterator

from tfos_jobs.errors import ConfigError, TfosError


class StorageError(TfosError):
    """A filesystem call failed; the message says why in a user's words (no Java stack).
    `missing`: the path does not exist (as opposed to being unreachable or forbidden)."""

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing


# Java exception classes and what they mean to a user, most specific first.
_REASONS = (
    ("UnsupportedFileSystemException", "no filesystem for this scheme in the Spark session: add its connector jar "
                                       "(e.g. hadoop-aws for s3a://, hadoop-azure for abfs://, the GCS connector for "
                                       "gs://) with spark.jars or --jars"),
    ("NoAuthWithAWSException", "no credentials: set them for Spark (e.g. spark.hadoop.fs.s3a.access.key and "
                               "secret.key, a credentials provider, or the environment)"),
    ("AccessControlException", "permission denied"),
    ("AccessDeniedException", "access denied (wrong credentials, or no permission)"),
    ("UnknownHostException", "unknown host"),
    ("ConnectException", "cannot connect (is the filesystem's server up and reachable from the driver?)"),
    ("ConnectTimeoutException", "connection timed out"),
    ("FileNotFoundException", "does not exist"),
    ("FileAlreadyExistsException", "already exists"),
)


def reason(error: BaseException) -> str:
    """A one-line reason for a failed filesystem call: what it means, then Java's own words."""
    text = str(getattr(error, "java_exception", None) or error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    for marker, meaning in _REASONS:
        if marker in text:
            detail = first.split(": ", 1)[-1][:300]
            return f"{meaning} ({detail})"
    if isinstance(error, FileNotFoundError):
        return "does not exist"
    if isinstance(error, PermissionError):
        return "permission denied"
    return first[:300]


@contextlib.contextmanager
def translated(path: str) -> Iterator[None]:
    """Python and Java errors of a call on `path` as a StorageError naming the path."""
    caught: tuple[type[BaseException], ...] = (*_java_errors(), OSError)
    try:
        yield
    except caught as e:
        missing = isinstance(e, FileNotFoundError) or "java.io.FileNotFoundException" in str(
            getattr(e, "java_exception", ""))
        raise StorageError(f"{path}: {reason(e)}", missing=missing) from None


def _java_errors() -> tuple[type[BaseException], ...]:
    """A classic session's Java errors (py4j's); a Spark Connect client may have no py4j at all."""
    try:
        from py4j.protocol import Py4JJavaError
    except ImportError:
        return ()
    return (Py4JJavaError,)


@contextlib.contextmanager
def named(setting: str, path: str) -> Iterator[None]:
    """A StorageError inside becomes a ConfigError that names the setting too."""
    try:
        yield
    except StorageError as e:
        raise ConfigError(f"{setting} = {path!r}: {str(e).split(': ', 1)[-1]}") from None
