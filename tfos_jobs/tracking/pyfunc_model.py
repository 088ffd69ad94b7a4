"""The MLflow `python_function` face of a tfos model: the same SavedModel, scored as the SQL
UDF scores it (the UDF's Scorer: spec defaults for nulls, out-of-vocabulary buckets).

`mlflow.pyfunc.load_model("models:/census@champion").predict(df)` gives the UDF's fields as
columns; `.unwrap_python_model().saved_model` is the SavedModel itself."""
from __future__ import annotations

import mlflow.pyfunc

SAVED_MODEL = "saved_model"  # the artifact's key, and its directory under the model's artifacts/


class SavedModelPyfunc(mlflow.pyfunc.PythonModel):
    _skip_type_hint_validation = True  # a DataFrame of the spec's columns in, the UDF's fields out

    def load_context(self, context):
        from udfs.predict import Scorer

        self.scorer = Scorer(context.artifacts[SAVED_MODEL])
        self.saved_model = self.scorer._loaded

    def predict(self, context, model_input, params=None):
        import pandas as pd
        import pyarrow as pa

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        missing = [n for n in self.scorer.inputs if n not in frame.columns]
        if missing:
            raise ValueError(f"the input lacks feature(s) {missing}; the model takes {list(self.scorer.inputs)}")
        table = pa.Table.from_pandas(frame[list(self.scorer.inputs)], preserve_index=False)
        out = self.scorer(pa.StructArray.from_arrays([table[n].combine_chunks() for n in self.scorer.inputs],
                                                     names=list(self.scorer.inputs)), {})
        if isinstance(out, pa.StructArray):
            return pd.DataFrame({field.name: out.field(i).to_pandas() for i, field in enumerate(out.type)})
        return out.to_pandas()
