"""Spark SQL prediction UDFs for models exported by tfos_jobs."""
from udfs.registration import PredictionUdf, register

__all__ = ["PredictionUdf", "register"]
