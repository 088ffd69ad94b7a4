"""Serving a model (driver side): `tfos predict` writes a table's rows with their predictions, `tfos sql` runs queries
with the prediction function registered, `tfos evaluate` scores sensor windows against known anomalies, `tfos serve-sql`
serves SQL clients. What they share with `tfos stream` is the serving library (`tfos_jobs.serving`); what runs on the
executors is the UDF in `udfs/`."""
