"""`tfos bench`: every stage measured against a baseline in the same run."""
