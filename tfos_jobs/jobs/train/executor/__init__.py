"""The train job's executor side: what runs in a TF node's Python worker."""
