"""Spark ML stages: `TFEstimator` in a `Pipeline` fits (prepare + train), the fitted pipeline saves, loads and
transforms as it did before the save; `CrossValidator` over it picks between settings by an evaluator; wrong settings
are refused before any Spark job."""
from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import BinaryClassificationEvaluator
from pyspark.ml.feature import SQLTransformer
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder
from pyspark.testing import assertDataFrameEqual

from tfos_jobs.api.ml import TFEstimator, TFModel
from tfos_jobs.errors import ConfigError

CONFIG = """
[sources.visits]                 # the DataFrame a fit is given stands for it
format = "parquet"
path = "nowhere"

[prepare]
main = "visits"
output = "unused"
files_per_split = 2

[features.visit_id]
kind = "key"

[features.minutes]
kind = "numeric"

[features.channel]
kind = "categorical"

[features.bought]
kind = "label"
task = "binary"
positive = ["yes"]
negative = ["no"]

[train]
strategy = "local"
epochs = 2
batch_size = 64
learning_rate = 0.01
early_stopping_patience = 0

[train.model]
kind = "wide_deep"
first_layer_size = 16
num_layers = 2
"""


SCHEMA = "visit_id long, minutes double, channel string, bought string"


def visit_rows(count: int = 1200) -> list[tuple]:
    """Whether a visitor bought: more likely the longer the visit, and by email."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(count):
        minutes = float(rng.exponential(10.0))
        channel = ["email", "search", "ads"][i % 3]
        bought = minutes / 10.0 + (1.0 if channel == "email" else 0.0) + rng.normal(0, 0.3) > 1.5
        rows.append((i, None if i % 97 == 0 else minutes, channel, "yes" if bought else "no"))
    return rows


@pytest.fixture(scope="module")
def visits(spark):
    return spark.createDataFrame(visit_rows(), SCHEMA)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ml") / "visits.toml"
    path.write_text(CONFIG)
    return str(path)


def test_a_pipeline_with_tf_estimator_fits_saves_loads_and_transforms_the_same(spark, visits, config_file, tmp_path):
    estimator = TFEstimator(config=config_file, workDir=str(tmp_path / "fits"), epochs=3)
    pipeline = Pipeline(stages=[SQLTransformer(statement="SELECT *, minutes * 60 AS seconds FROM __THIS__"), estimator])
    fitted = pipeline.fit(visits)
    [tf_model] = [s for s in fitted.stages if isinstance(s, TFModel)]
    assert (tmp_path / "fits").is_dir() and str(tmp_path / "fits") in tf_model.getOrDefault("modelDir")
    scored = fitted.transform(visits)
    assert {"seconds", "prediction", "probability", "predicted_label", "label_index"} <= set(scored.columns)
    rows = scored.select("bought", "prediction", "probability", "predicted_label", "label_index").collect()
    assert len(rows) == 1200
    assert {r.predicted_label for r in rows} == {"yes", "no"}
    for r in rows:
        assert r.prediction == (1.0 if r.predicted_label == "yes" else 0.0)
        assert r.label_index == (1.0 if r.bought == "yes" else 0.0)
        assert abs(r.probability[0] + r.probability[1] - 1.0) < 1e-6
        assert (r.probability[1] >= 0.5) == (r.prediction == 1)
    accuracy = np.mean([r.prediction == r.label_index for r in rows])
    assert accuracy > 0.8, accuracy

    saved = str(tmp_path / "saved-pipeline")
    fitted.write().save(saved)
    assert (tmp_path / "saved-pipeline" / "stages").is_dir()
    loaded = PipelineModel.load(saved)
    [loaded_tf] = [s for s in loaded.stages if isinstance(s, TFModel)]
    stage_dir = tmp_path / "saved-pipeline" / "stages" / f"1_{tf_model.uid}"
    assert loaded_tf.getOrDefault("modelDir") == f"{stage_dir}/model"  # the saved stage carries its model
    assert (stage_dir / "model" / "saved_model" / "saved_model.pb").is_file()
    columns = ["visit_id", "prediction", "probability", "predicted_label"]
    assertDataFrameEqual(loaded.transform(visits).select(columns), scored.select(columns), rtol=1e-6)
    with pytest.raises(ConfigError, match="exists"):
        loaded_tf.write().save(str(stage_dir))
    # an unfitted estimator saves and loads with its params
    estimator.write().save(str(tmp_path / "estimator"))
    again = TFEstimator.load(str(tmp_path / "estimator"))
    assert again.getOrDefault("epochs") == 3 and again.getOrDefault("config") == config_file


@pytest.mark.slow  # five trainings, about 30-40 s: `make test-all`; the pipeline above runs in `make test`
def test_cross_validator_over_tf_estimator_picks_by_the_evaluator(spark, visits, config_file, tmp_path):
    estimator = TFEstimator(config=config_file, workDir=str(tmp_path / "cv"), epochs=1)
    rates = [1e-5, 0.02]
    grid = ParamGridBuilder().addGrid(estimator.learningRate, rates).build()
    evaluator = BinaryClassificationEvaluator(labelCol="label_index", rawPredictionCol="probability")
    cv = CrossValidator(estimator=estimator, estimatorParamMaps=grid, evaluator=evaluator, numFolds=2, seed=3)
    model = cv.fit(visits)
    assert len(model.avgMetrics) == 2 and all(0.0 < m <= 1.0 for m in model.avgMetrics)
    assert max(model.avgMetrics) > 0.8, model.avgMetrics
    fits = [p for p in (tmp_path / "cv").iterdir() if p.name.startswith("fit-")]
    assert len(fits) == 5  # each setting on 2 folds, then the best on everything
    refit = max(fits, key=lambda p: p.stat().st_mtime)
    assert str(refit) in model.bestModel.getOrDefault("modelDir")
    assert evaluator.evaluate(model.bestModel.transform(visits)) > 0.8


def test_wrong_settings_are_refused_before_any_spark_job(spark, visits, config_file, tmp_path):
    with pytest.raises(ConfigError, match="set workDir="):
        TFEstimator(config=config_file).fit(visits)
    with pytest.raises(ConfigError, match="train.strategy"):
        TFEstimator(config=config_file, workDir=str(tmp_path), strategy="everywhere").fit(visits)
    with pytest.raises(TypeError, match="settings must be a mapping"):
        TFEstimator(settings=["train.epochs=2"])
    with pytest.raises(ConfigError, match="TFModel.modelDir"):
        TFModel(modelDir=str(tmp_path / "nothing")).transform(visits)
