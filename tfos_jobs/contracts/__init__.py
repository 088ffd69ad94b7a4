"""Contracts between the package's parts: each has one owner module here that both sides import.

serving   what an exported model offers (signatures, outputs, assets) and what the UDF returns
model_dir the files of a model directory (the driver writes them, wherever it lives)
metrics   what training reports: the chief's result, metrics.json, `tfos evaluate`'s figures
node_args what the driver hands every TF node, and how the node job starts
workspace a TF node's own directory on its executor's local disk
"""
