"""Contracts between the package's parts: each has one owner module here that both sides import.
This list is the one the docs point to; tests/unit/test_docs.py checks that it names every module.

dataset       a prepared dataset's layout and manifest (prepare writes; training, serving read)
model_dir     the files of a model directory (the driver writes them, wherever it lives)
epoch_line    one finished epoch: the chief -> the driver -> progress.jsonl, the console, the sweep,
              MLflow and metrics.json's history
metrics       what training reports: the chief's result, metrics.json, `tfos evaluate`'s figures
serving       what an exported model offers (signatures, outputs, assets) and what the UDF returns
prediction    what `tfos predict` reports, and the summary file beside its output
mlflow_layout where an MLflow model keeps its SavedModel (tracking logs it; serving finds it)
node_args     what the driver hands every TF node, and how the node job starts
workspace     a TF node's own directory on its executor's local disk
sweep_dir     a sweep directory's files
trial         a sweep trial: what its task is given and returns, its status and its result row
sql_endpoint  what `tfos serve-sql` offers its clients and operators (URL, ready line, status view)
stream        what `tfos stream` writes: output columns, per-micro-batch sink layout, quarantine
              reasons, progress lines
packed_env    a packed environment's layout (`tfos pack-env`): where its packages are
values        JSON values as the contracts carry them (`Json`, `JsonObject`)
"""
