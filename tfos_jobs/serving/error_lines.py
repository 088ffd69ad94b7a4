"""A failed query's error as one line a user reads: the analyzer's or parser's message, or a Python worker's exception,
without the JVM's or the worker's stack trace (`tfos sql`, `tfos predict`, `tfos stream`)."""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException, PythonException
from pyspark.logger import PySparkLogger

from tfos_jobs.errors import TfosError

# pyspark logs every query error it converts, with the JVM's stack trace, before raising it.
PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
PYTHON_ERROR_LINE = re.compile(r"^\w+(Error|Exception): .+")
SQL_STATE = re.compile(r"\s*SQLSTATE: \w+(?:; (line \d+ pos \d+))?.*$")


def error_line(e: BaseException) -> str:
    """The line of a query's error that says what is wrong: the analyzer's or parser's message,
    or, for a failure in a Python worker, its exception's last line, not the traceback."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if isinstance(e, PythonException):
        raised = [line for line in lines if PYTHON_ERROR_LINE.match(line)]
        lines = raised[-1:] or lines
    first = lines[0] if lines else type(e).__name__
    state = SQL_STATE.search(first)  # Spark's "<message> SQLSTATE: 42703; line 1 pos 7"
    if state is None:
        return first
    return first[:state.start()] + (f" ({state[1]})" if state[1] else "")


@contextmanager
def query_errors(context: str = "") -> Iterator[None]:
    """Errors of a query (analysis, parsing, its tasks) as one TfosError line, `context` first."""
    # pyspark's own logger class: one this module created as a plain Logger would make pyspark's
    # later error logging fail (its calls pass fields a plain Logger does not take)
    loggers = [PySparkLogger.getLogger(name) for name in PYSPARK_ERROR_LOGGERS]
    disabled = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    except (PySparkException, Py4JError) as e:
        raise TfosError(f"{context}{error_line(e)}") from None
    finally:
        for logger, was in zip(loggers, disabled):
            logger.disabled = was
