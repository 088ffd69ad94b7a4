"""The MLflow `python_function` face of a tfos model: the same SavedModel, scored as the SQL UDF scores it (the UDF's
Scorer: spec defaults for nulls, out-of-vocabulary buckets).

`mlflow.pyfunc.load_model("models:/census@champion").predict(df)` gives the UDF's fields as columns;
`.unwrap_python_model().saved_model` is the SavedModel itself. Through `mlflow.pyfunc.spark_udf` it takes `struct(*)` or
the inputs as columns in the model's order, as the SQL UDF does.

On a local master (`local[*]`, `local-cluster`, a single-node cluster) `spark_udf` loads the model again in every Spark
task; the model itself is kept in the SQL UDF's per-worker cache (`udfs.predict.scorer`), so a Python worker loads it
once, as on a cluster."""
from __future__ import annotations

import os
from typing import Sequence

import pandas as pd
from mlflow.pyfunc import PythonModel

from tfos_jobs.contracts.serving import SAVED_MODEL_FILE

SAVED_MODEL = "saved_model"  # the artifact's key, and its directory under the model's artifacts/


def model_columns(frame: pd.DataFrame, inputs: Sequence[str]) -> pd.DataFrame:
    """The frame's columns the model reads, in its input order. `spark_udf(*columns)` on a model
    logged without a signature names the columns "0", "1", ...: those are taken by position."""
    if list(frame.columns) == [str(i) for i in range(len(inputs))]:
        return frame.set_axis(list(inputs), axis=1)
    missing = [n for n in inputs if n not in frame.columns]
    if missing:
        raise ValueError(f"the input lacks feature(s) {missing} (it has columns {[str(c) for c in frame.columns]}); "
                         f"the model takes {list(inputs)}, by name or as {len(inputs)} columns in that order")
    return frame[list(inputs)]


class SavedModelPyfunc(PythonModel):
    _skip_type_hint_validation = True  # a DataFrame of the spec's columns in, the UDF's fields out

    def load_context(self, context):
        from udfs.predict import scorer

        export_dir = context.artifacts[SAVED_MODEL]
        written = os.stat(os.path.join(export_dir, SAVED_MODEL_FILE))
        self.scorer = scorer(export_dir, f"{written.st_mtime_ns}-{written.st_size}")
        self.saved_model = self.scorer._loaded

    def predict(self, context, model_input, params=None):
        import pyarrow as pa

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        table = pa.Table.from_pandas(model_columns(frame, self.scorer.inputs), preserve_index=False)
        out = self.scorer(pa.StructArray.from_arrays([table[n].combine_chunks() for n in self.scorer.inputs],
                                                     names=list(self.scorer.inputs)), {})
        if isinstance(out, pa.StructArray):
            return pd.DataFrame({field.name: out.field(i).to_pandas() for i, field in enumerate(out.type)})
        return out.to_pandas()
