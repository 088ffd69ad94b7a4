"""The train job's driver side."""
