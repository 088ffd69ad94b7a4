"""Serving a model (driver side): `tfos predict` writes a table's rows with their predictions,
`tfos sql` runs queries with the prediction function registered, `tfos evaluate` scores sensor
windows against known anomalies. What runs on the executors is the UDF in `udfs/`."""
