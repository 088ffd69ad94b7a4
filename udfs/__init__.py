"""Spark SQL prediction UDFs for models exported by tfos_jobs."""
