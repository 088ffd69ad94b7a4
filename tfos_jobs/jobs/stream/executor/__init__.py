"""The stream job's executor side: the per-asset window state."""
