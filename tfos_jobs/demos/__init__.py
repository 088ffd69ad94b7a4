"""The demos (`tfos demo`, `tfos demo-stream`, `tfos demo-warehouse`): the embedded data, then
the jobs on it through the Python API, printing each step and checking what it found.

pipeline   the census pipeline (rows, wide & deep) or the sensor fleet's (windows, autoencoder)
stream     the fleet's readings replayed into Kafka, scored as they arrive, compared with batch
warehouse  the census tables served from PostgreSQL and Hive, prepared from there, compared
"""
