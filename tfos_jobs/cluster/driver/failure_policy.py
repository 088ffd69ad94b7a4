"""What a failed TF cluster attempt means: can a relaunch fix it, and what to tell the user."""
from __future__ import annotations

# TensorFlow errors that mean a peer went away, not that the computation is wrong.
RETRIABLE_ERRORS = ("UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError")
# Start-up failures a relaunch fixes: a TF server's port was taken between the node finding
# it free and TensorFlow binding it (the next attempt's nodes take fresh ports); and an executor
# lost with its node, as Spark reports it for a task that could not report itself.
RETRIABLE_MESSAGES = ("Could not start gRPC server", "ExecutorLostFailure", "was lost with its executor")


def retriable(tracebacks: list[str]) -> bool:
    """Retry a lost executor (no node reported an error), a peer failure or a port taken at start; not a code error."""
    return all(any(name in text for name in RETRIABLE_ERRORS + RETRIABLE_MESSAGES) for text in tracebacks)


def failure_message(errors: dict[str, tuple[str, str]], task_error: BaseException | None) -> str:
    """`errors`: node name -> (error file, the traceback the node wrote there); `task_error`: what Spark reported for
    the node job. Each failed node's last line comes first, with where to read the rest."""
    if errors:
        parts = []
        for node, (path, text) in errors.items():
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            parts.append(f"TF node {node} failed: {lines[-1] if lines else '(no message)'}\n  full traceback: {path}")
        return "\n".join(parts)
    if task_error is not None:
        lines = str(task_error).strip().splitlines()
        return "a TF node task failed: " + next((ln for ln in reversed(lines) if "Error" in ln or "Exception" in ln),
                                                  lines[-1] if lines else "unknown error")
    return "a TF node task failed (see the executor logs)"


def task_traceback(error_message: str) -> str:
    """The Python part of the error Spark recorded for a failed task: its traceback without the
    JVM's stack frames and error-class suffixes."""
    lines = []
    for line in error_message.splitlines():
        if line.startswith("\tat ") or line.startswith("\t..."):
            break
        if not line.strip().startswith("SQLSTATE:"):
            lines.append(line)
    return "\n".join(lines).strip()
