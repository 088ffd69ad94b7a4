"""The stream job's driver side: the query, its micro-batches, its progress."""
