"""Runs, sweeps and models in MLflow: logged from the driver beside the work, registered, resolved."""
