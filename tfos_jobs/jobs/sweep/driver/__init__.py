"""The sweep job's driver side."""
