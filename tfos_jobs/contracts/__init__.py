"""Contracts between the package's parts: each has one owner module here that both sides import.

serving   what an exported model offers (signatures, outputs, assets) and what the UDF returns
run_dir   the files a training run's driver and TF nodes exchange
node_args what the driver hands every TF node
"""
