"""The sweep job's executor side."""
