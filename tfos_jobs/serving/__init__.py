"""The serving library, driver side: what the serving jobs (`jobs/serve`: `tfos predict`, `tfos
sql`) and `tfos stream` share. What runs on the executors is the UDF in `udfs/`.

scoring      the rows to score, and a table with the prediction columns appended
outputs      where predictions are written: files, a catalog table, a database; exactly the rows in
error_lines  a failed query's error as one line
"""
