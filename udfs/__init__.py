"""Spark SQL prediction UDFs for models exported by tfos_jobs."""
from udfs.registration import PredictionUdf, register
from udfs.signature_udf import SignatureUdf

__all__ = ["PredictionUdf", "SignatureUdf", "register"]
