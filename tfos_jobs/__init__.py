"""Distributed TensorFlow on Apache Spark: prepare, train, serve and sweep from one feature spec."""

__version__ = "0.1.0"
