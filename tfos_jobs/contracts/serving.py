"""The serving contract: what an exported SavedModel offers and what the prediction UDF returns.

`model.export` writes it; the UDF (`udfs/`), `tfos predict`, `tfos sql` and the benchmarks read it. Names a user sees in
SQL (`probability`, `label`, `value`) are part of it."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tfos_jobs.contracts.dataset import MANIFEST, SPEC, STATS, VOCAB
from tfos_jobs.tasks import Task

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

    from tfos_jobs.features.spec import FeatureSpec

# Signatures of every exported model.
SERVING_SIGNATURE = "serving_default"  # one 1-D input per raw column, named after the feature
EXAMPLES_SIGNATURE = "predict_examples"  # serialized tf.Example
SIGNATURES = (SERVING_SIGNATURE, EXAMPLES_SIGNATURE)
EXAMPLES_INPUT = "examples"  # the input of EXAMPLES_SIGNATURE
# Wide & deep models also take a batch the way the prediction UDF holds it, with the outputs of
# SERVING_SIGNATURE: CODES_STRINGS, the distinct values of the categorical inputs; CODES_CODES
# [len(spec.categorical), rows] int32, each row's index into them; CODES_NUMBERS
# [len(spec.numeric), rows] float32, nulls filled. Both in spec order. Other models lack it.
CODES_SIGNATURE = "serving_codes"
CODES_STRINGS, CODES_CODES, CODES_NUMBERS = "strings", "codes", "numbers"
# A built-in model with text inputs: SERVING_SIGNATURE's inputs, but each text as its token ids, [rows, width] int64
# (`features.text.graph_tokens` looked up in the text's vocabulary: 0 padding, 1 unseen, 2 + the vocabulary's line),
# so that a caller that tokenized (the prediction function, from Arrow buffers) skips the graph's tokenizer.
IDS_SIGNATURE = "serving_ids"

# Output fields.
PROBABILITY = "probability"  # binary: P(positive); multiclass: the top class's probability
PROBABILITIES = "probabilities"  # multiclass: one per class
CLASS_ID = "class_id"
LABEL = "label"  # the predicted class's name
VALUE = "value"  # regression
LATENT = "latent"  # autoencoder: the encoder's output, a vector per window
RECONSTRUCTION_ERROR = "reconstruction_error"  # autoencoder: mean squared error of the standardised window
IS_ANOMALY = "is_anomaly"  # autoencoder: reconstruction_error above the threshold fixed in training

# What a model predicts (tasks.Task): its label's task, or AUTOENCODER for sensor windows.
AUTOENCODER = Task.AUTOENCODER

# Both signatures' outputs, per label task.
SIGNATURE_OUTPUTS: dict[str, tuple[str, ...]] = {
    Task.BINARY: (PROBABILITY, CLASS_ID, LABEL),
    Task.MULTICLASS: (PROBABILITIES, PROBABILITY, CLASS_ID, LABEL),
    Task.REGRESSION: (VALUE,),
    AUTOENCODER: (LATENT, RECONSTRUCTION_ERROR, IS_ANOMALY),
}
# The Keras model's output layer, per task: the signature output of the same meaning.
MODEL_OUTPUT: dict[str, str] = {Task.BINARY: PROBABILITY, Task.MULTICLASS: PROBABILITIES, Task.REGRESSION: VALUE}
# What the SQL function returns: a struct of these (classification), or a bare double (regression).
UDF_FIELDS: dict[str, tuple[str, ...]] = {Task.BINARY: (PROBABILITY, LABEL), Task.MULTICLASS: (PROBABILITY, LABEL), Task.REGRESSION: (VALUE,),
              AUTOENCODER: (LATENT, RECONSTRUCTION_ERROR, IS_ANOMALY)}

# The UDF's counters (`PredictionUdf.counts()`): COUNT_ROWS scored, and per feature
# f"{COUNT_NULL}:{name}" nulls filled with the spec's default (a list's null or empty elements too),
# f"{COUNT_UNSEEN}:{name}" values (a text's tokens, a list's elements) outside the vocabulary,
# f"{COUNT_TRUNCATED}:{name}" strings cut to max_length, texts to max_tokens words, lists to max_length.
COUNT_ROWS, COUNT_NULL, COUNT_UNSEEN, COUNT_TRUNCATED = "rows", "null", "unseen", "truncated"


def count_key(kind: str, feature: str) -> str:
    return f"{kind}:{feature}"


def count_keys(spec: "FeatureSpec") -> list[str]:
    """Every counter the prediction function of a model on `spec` can report."""
    names = [f.name for f in (*spec.categorical, *spec.numeric, *spec.bags, *spec.vectors)]
    keys = [COUNT_ROWS, *(count_key(COUNT_NULL, name) for name in names)]
    keys += [count_key(COUNT_UNSEEN, f.name) for f in spec.with_vocabulary]
    if spec.is_sequence and spec.key is not None:  # a window's asset: null, or not among the train split's
        keys += [count_key(COUNT_NULL, spec.key.name), count_key(COUNT_UNSEEN, spec.key.name)]
    cut = [*(f for f in spec.categorical if f.max_length is not None), *spec.bags]
    return keys + [count_key(COUNT_TRUNCATED, f.name) for f in cut]


# The prediction function as `tfos predict` calls it: its result and the counters of each Arrow
# batch (on the batch's first row), which the query observes (`udfs.PredictionUdf.counted`).
COUNTED_VALUE, COUNTED = "value", "counts"


# `tfos predict`'s output: the input rows with the UDF's fields as `predicted_<field>` columns, or
# a regression's value as `prediction`; sensor windows keep their fields' own names.
PREDICTION = "prediction"


def predicted(field: str) -> str:
    return f"predicted_{field}"


# The asset layout: the dataset's `_meta/` files the model was trained on, inside the model.
ASSETS = "assets"
SAVED_MODEL_FILE = "saved_model.pb"  # its presence makes a directory a SavedModel


def task_of(spec: "FeatureSpec") -> str:
    """The key of the tables above for a model trained on `spec`."""
    return AUTOENCODER if spec.is_sequence else spec.label.task


def class_names(spec: "FeatureSpec") -> list[str]:
    """A classifier's LABEL output for each CLASS_ID: the label's names, negative first."""
    label = spec.label
    if label.task == Task.BINARY:
        return [label.negative[0], label.positive[0]] if label.positive else ["0", "1"]
    return list(label.classes)


def udf_returns_struct(task: str) -> bool:
    return task != Task.REGRESSION


def udf_return_type(task: str) -> "DataType":
    """The Spark type of the prediction UDF's result for a task (`task_of`)."""
    from pyspark.sql.types import ArrayType, BooleanType, DoubleType, FloatType, StringType, StructField, StructType

    if not udf_returns_struct(task):
        return DoubleType()
    if task == AUTOENCODER:
        return StructType([StructField(LATENT, ArrayType(FloatType())), StructField(RECONSTRUCTION_ERROR, DoubleType()),
                           StructField(IS_ANOMALY, BooleanType())])
    return StructType([StructField(PROBABILITY, DoubleType()), StructField(LABEL, StringType())])


def counted_return_type(task: str) -> "DataType":
    from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

    return StructType([StructField(COUNTED_VALUE, udf_return_type(task)),
                       StructField(COUNTED, MapType(StringType(), LongType()))])


def spec_asset(export_dir: str) -> str:
    return f"{export_dir.rstrip('/')}/{ASSETS}/{SPEC}"


def stats_asset(export_dir: str) -> str:
    return f"{export_dir.rstrip('/')}/{ASSETS}/{STATS}"


def manifest_asset(export_dir: str) -> str:
    """The manifest of the dataset the model was trained on: its splits (`tfos evaluate` draws the
    same eval keys), sources and counts. Models exported before it was kept have none."""
    return f"{export_dir.rstrip('/')}/{ASSETS}/{MANIFEST}"


def vocab_asset(export_dir: str, feature: str) -> str:
    return f"{export_dir.rstrip('/')}/{ASSETS}/{VOCAB}/{feature}.txt"
