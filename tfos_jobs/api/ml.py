"""Spark ML stages: `TFEstimator` prepares and trains on the DataFrame it is fitted on, `TFModel` scores with the
trained SavedModel, so a TensorFlow model sits in a `Pipeline` and is tuned by `CrossValidator` or
`TrainValidationSplit` like any Spark ML stage. Example (docs/python_api.md, tests/spark/test_ml_stages.py)::

    from pyspark.ml import Pipeline
    from tfos_jobs.api.ml import TFEstimator

    tf = TFEstimator(config="conf/census.toml", workDir="hdfs:///tmp/census-fits", epochs=3)
    model = Pipeline(stages=[tf]).fit(people)
    model.transform(people).select("prediction", "probability", "predicted_label").show()
    model.write().save("hdfs:///models/census-pipeline")

Each fit writes its dataset and model under `workDir` (any filesystem), in a directory of its own. A saved `TFModel`
carries its model directory with it (`<path>/model`), so the saved stage is whole wherever it is loaded.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from typing import Any, Mapping

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsReader, DefaultParamsWritable, DefaultParamsWriter, \
    MLReadable, MLReader, MLWritable, MLWriter
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs import config as config_mod
from tfos_jobs.contracts import serving as contract
from tfos_jobs.errors import ConfigError
from tfos_jobs.tasks import Task

MODEL = "model"  # a saved TFModel's model directory, under the stage's path
# Typed shortcuts for the `[train]` settings a grid most often varies: Param name -> dotted key.
TRAIN_PARAMS = {"epochs": "train.epochs", "batchSize": "train.batch_size", "learningRate": "train.learning_rate",
                "strategy": "train.strategy", "workers": "train.workers"}


def _settings(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"settings must be a mapping of dotted config keys to values, got {value!r}")
    return dict(value)


class _Outputs(Params):
    """The columns a TFModel adds, Spark ML's names by default."""

    predictionCol = Param(Params._dummy(), "predictionCol", "the predicted class index (the label's classes in "
                          "order, negative first) or the regression value, a double", TypeConverters.toString)
    probabilityCol = Param(Params._dummy(), "probabilityCol", "binary: the vector [P(negative), P(positive)]; "
                           "multiclass: the top class's probability; \"\" for none", TypeConverters.toString)
    predictedLabelCol = Param(Params._dummy(), "predictedLabelCol", "the predicted class's name; \"\" for none",
                              TypeConverters.toString)
    labelIndexCol = Param(Params._dummy(), "labelIndexCol", "the index of the row's own label (when the DataFrame "
                          "has it), for an evaluator; \"\" for none", TypeConverters.toString)
    batchSize = Param(Params._dummy(), "batchSize", "rows per model call when scoring (0: each Arrow batch); "
                      "in TFEstimator the training batch size", TypeConverters.toInt)

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(predictionCol="prediction", probabilityCol="probability",
                         predictedLabelCol=contract.predicted(contract.LABEL), labelIndexCol="label_index")


class TFEstimator(Estimator, _Outputs, DefaultParamsReadable, DefaultParamsWritable):
    """Prepare the DataFrame as the config's main table (its vocabularies, statistics, split, TFRecords) and train the
    config's model on it: `fit` returns the `TFModel`. Settings are the config file's, then `settings` (dotted keys,
    typed values), then the typed Params set here (`epochs`, `batchSize`, `learningRate`, `strategy`, `workers`), so a
    grid may vary any of them. Row models only: sensor windows are prepared from files (`tfos prepare`)."""

    config = Param(Params._dummy(), "config", "the TOML config file ([features], [prepare], [train], ...)",
                   TypeConverters.toString)
    settings = Param(Params._dummy(), "settings", "config settings by dotted key, typed, e.g. "
                     "{'train.model.kind': 'mymodels:build'}", _settings)
    workDir = Param(Params._dummy(), "workDir", "where each fit writes its dataset and model (any filesystem)",
                    TypeConverters.toString)
    table = Param(Params._dummy(), "table", "the source the DataFrame stands for (default: the config's "
                  "prepare.main)", TypeConverters.toString)
    epochs = Param(Params._dummy(), "epochs", "train.epochs", TypeConverters.toInt)
    learningRate = Param(Params._dummy(), "learningRate", "train.learning_rate", TypeConverters.toFloat)
    strategy = Param(Params._dummy(), "strategy", "train.strategy", TypeConverters.toString)
    workers = Param(Params._dummy(), "workers", "train.workers", TypeConverters.toInt)
    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(self, *, config: str | None = None, settings: Mapping[str, Any] | None = None,
                 workDir: str | None = None, table: str | None = None, epochs: int | None = None,
                 batchSize: int | None = None, learningRate: float | None = None, strategy: str | None = None,
                 workers: int | None = None, predictionCol: str | None = None, probabilityCol: str | None = None,
                 predictedLabelCol: str | None = None, labelIndexCol: str | None = None) -> None:
        super().__init__()
        self._setDefault(settings={})
        self._set(**self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs: Any) -> "TFEstimator":
        return self._set(**self._input_kwargs)

    def loaded_config(self) -> config_mod.Config:
        """The config this estimator trains with, checked before any Spark job."""
        for name in ("config", "workDir"):
            if not self.isDefined(getattr(self, name)):
                raise ConfigError(f"TFEstimator: set {name}=")
        whole = config_mod.load(self.getOrDefault(self.config))
        typed = {key: self.getOrDefault(name) for name, key in TRAIN_PARAMS.items() if self.isSet(getattr(self, name))}
        given = self.getOrDefault(self.settings)
        merged = dict(given)
        merged.update(typed)
        whole = whole.with_settings(merged)
        if whole.features.is_sequence:
            raise ConfigError(f"TFEstimator: {self.getOrDefault(self.config)} holds sensor windows, which are "
                              "prepared from their files (tfos prepare), not from a DataFrame")
        return whole

    def _fit(self, dataset: DataFrame) -> "TFModel":
        from tfos_jobs import api

        whole = self.loaded_config()
        spark = dataset.sparkSession
        fit_dir = f"{self.getOrDefault(self.workDir).rstrip('/')}/fit-{uuid.uuid4().hex[:12]}"
        main = self.getOrDefault(self.table) if self.isDefined(self.table) else whole.prepare.main
        manifest = api.prepare(spark, config=whole, output=f"{fit_dir}/dataset", tables={main: dataset})
        trained = whole.with_settings({"train.dataset": manifest.output, "train.model_dir": f"{fit_dir}/{MODEL}"})
        result = api.train(spark, config=trained)
        model = TFModel(modelDir=result.model_dir)
        return self._copyValues(model)


class TFModel(Model, _Outputs, MLReadable, MLWritable):
    """A trained SavedModel as a Spark ML model: `transform` adds the prediction columns (`_Outputs`), scored by the
    package's prediction function (the SQL function `api.register` makes), so nulls, unseen values and the counters
    behave as in SQL."""

    modelDir = Param(Params._dummy(), "modelDir", "the trained model's directory (any filesystem)",
                     TypeConverters.toString)
    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(self, *, modelDir: str | None = None, predictionCol: str | None = None,
                 probabilityCol: str | None = None, predictedLabelCol: str | None = None,
                 labelIndexCol: str | None = None, batchSize: int | None = None) -> None:
        super().__init__()
        self._setDefault(batchSize=0)
        self._set(**self._input_kwargs)

    def function_name(self) -> str:
        return f"tfos_model_{self.uid.replace('-', '_')}"

    def _transform(self, dataset: DataFrame) -> DataFrame:
        from udfs import register

        if not self.isDefined(self.modelDir):
            raise ConfigError("TFModel: set modelDir=")
        batch = self.getOrDefault(self.batchSize)
        udf = register(dataset.sparkSession, self.function_name(), self.getOrDefault(self.modelDir),
                       batch_size=batch or None, setting="TFModel.modelDir")
        task = contract.task_of(udf.spec)
        if task == contract.AUTOENCODER:
            raise ConfigError(f"TFModel: {self.getOrDefault(self.modelDir)} scores sensor windows; score them with "
                              "tfos predict or its SQL function")
        hidden = f"__{self.function_name()}"
        out = dataset.withColumn(hidden, udf())
        classes = [] if task == Task.REGRESSION else contract.class_names(udf.spec)
        columns = self._columns(F.col(hidden), task, classes)
        label = udf.spec.label.name
        index_col = self.getOrDefault(self.labelIndexCol)
        if index_col and classes and label in dataset.columns:
            columns[index_col] = _index_of(F.col(label).cast("string"), classes)
        return out.withColumns(columns).drop(hidden)

    def _columns(self, result: Column, task: str, classes: list[str]) -> dict[str, Column]:
        from pyspark.ml.functions import array_to_vector

        if task == Task.REGRESSION:
            return {self.getOrDefault(self.predictionCol): result}
        label = result[contract.LABEL]
        probability = result[contract.PROBABILITY]
        columns = {self.getOrDefault(self.predictionCol): _index_of(label, classes)}
        if self.getOrDefault(self.probabilityCol):
            columns[self.getOrDefault(self.probabilityCol)] = (
                array_to_vector(F.array(1.0 - probability, probability)) if task == Task.BINARY else probability)
        if self.getOrDefault(self.predictedLabelCol):
            columns[self.getOrDefault(self.predictedLabelCol)] = label
        return columns

    def write(self) -> MLWriter:
        return _ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _ModelReader()


def _index_of(label: Column, classes: list[str]) -> Column:
    """A class name's index among `classes`, as a double (null for a name outside them)."""
    position = F.array_position(F.array(*[F.lit(c) for c in classes]), label)
    return F.when(position > 0, (position - 1).cast("double"))


class _ModelWriter(MLWriter):
    """The stage's Params (Spark ML's metadata) and a copy of its model directory under `<path>/model`."""

    def __init__(self, instance: TFModel):
        super().__init__()
        self.instance = instance

    def save(self, path: str) -> None:
        from tfos_jobs.storage import Storage

        storage = Storage(self.sparkSession)
        if storage.exists(path):
            if not self.shouldOverwrite:
                raise ConfigError(f"TFModel.save: {path} exists (write().overwrite() replaces it)")
            storage.delete(path)
        self.saveImpl(path)

    def saveImpl(self, path: str) -> None:
        from tfos_jobs.storage import Storage

        storage = Storage(self.sparkSession)
        source = self.instance.getOrDefault(self.instance.modelDir)
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession,
                                         paramMap={**self._params(), "modelDir": MODEL})
        with tempfile.TemporaryDirectory(prefix="tfos-model-") as local:
            for rel, _ in storage.tree(source):
                os.makedirs(os.path.dirname(os.path.join(local, rel)), exist_ok=True)
                storage.download(f"{source.rstrip('/')}/{rel}", os.path.join(local, rel))
            storage.replace_dir(local, f"{path.rstrip('/')}/{MODEL}")

    def _params(self) -> dict[str, Any]:
        return {p.name: v for p, v in self.instance._paramMap.items()}


class _ModelReader(MLReader):
    def load(self, path: str) -> TFModel:
        spark = SparkSession.active()
        metadata = DefaultParamsReader.loadMetadata(path, spark)
        model = TFModel()
        model._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(model, metadata)
        return model._set(modelDir=f"{path.rstrip('/')}/{MODEL}")
