"""A TF node on an executor: what runs in its Python worker."""
