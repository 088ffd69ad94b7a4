"""What a failed TF cluster attempt means: can a relaunch fix it, and what to tell the user."""
from __future__ import annotations

# TensorFlow errors that mean a peer went away, not that the computation is wrong.
RETRIABLE_ERRORS = ("UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError")
# The one start-up failure a relaunch fixes: a TF server's port was taken between the node
# finding it free and TensorFlow binding it (the next attempt's nodes take fresh ports).
RETRIABLE_MESSAGES = ("Could not start gRPC server",)


def retriable(tracebacks: list[str]) -> bool:
    """Retry a lost executor (no node reported an error), a peer failure or a port taken at start;
    not a code error."""
    return all(any(name in text for name in RETRIABLE_ERRORS + RETRIABLE_MESSAGES) for text in tracebacks)


def failure_message(errors: dict[str, tuple[str, str]], task_error: BaseException | None) -> str:
    """`errors`: node name -> (error file, the traceback the node wrote there); `task_error`:
    what Spark reported for the node job. Each failed node's last line comes first, with
    where to read the rest."""
    if errors:
        parts = []
        for node, (path, text) in errors.items():
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            parts.append(f"TF node {node} failed: {lines[-1] if lines else '(no message)'}\n  full traceback: {path}")
        return "\n".join(parts)
    if task_error is not None:
        text = str(task_error).strip().splitlines()
        return "a TF node task failed: " + next((ln for ln in reversed(text) if "Error" in ln or "Exception" in ln),
                                                  text[-1] if text else "unknown error")
    return "a TF node task failed (see the executor logs)"

