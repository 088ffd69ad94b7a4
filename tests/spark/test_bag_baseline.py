"""The bag-of-words baseline (`data.bag_baseline`) and `tfos baseline` on a tiny table whose text,
list and numbers each decide part of the label: the tokens it bags, the figures it computes, the
regParam it chooses on eval, and the model's figures read from predictions."""
from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import api, config
from tfos_jobs.contracts import serving
from tfos_jobs.data import bag_baseline as bag
from tfos_jobs.errors import ConfigError, InputError
from tfos_jobs.features.kinds import CategoricalFeature, KeyFeature, Label, ListFeature, NumericFeature, TextFeature
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.jobs.serve import baseline as job

CLASSES = ("old", "new", "odd")
predicted_label = serving.predicted(serving.LABEL)
SPEC = FeatureSpec((KeyFeature("id", dtype="string"), TextFeature("title"), ListFeature("tags"),
                    CategoricalFeature("kind"), NumericFeature("size"),
                    Label("period", task="multiclass", classes=CLASSES)))
SCHEMA = "id string, title string, tags array<string>, kind string, size double, period string, subset string"


def table(n: int = 240) -> list[tuple]:
    """`old` rows say "portrait" in their title, `new` rows carry the tag "abstract", `odd` rows are large;
    every fifth row is eval, every fifth after it test."""
    rows = []
    for i in range(n):
        period = CLASSES[i % 3]
        title = {"old": "Portrait of a Lady", "new": "Untitled", "odd": "Untitled"}[period] + f" no. {i}"
        tags = ["abstract", "colour"] if period == "new" else ["figure", None, ""] if i % 2 else None
        subset = ("train", "train", "train", "eval", "test")[i // 3 % 5]
        rows.append((f"r{i:03d}", title, tags, "print" if i % 2 else None, 1000.0 if period == "odd" else float(i % 7),
                     period, subset))
    return rows


def test_tokens_bag_words_elements_and_values_by_feature_name(spark):
    df = spark.createDataFrame([("a", "Portrait, of a LADY!", ["figure", None, ""], "print", 2.0, "old", "train"),
                                ("b", None, None, None, None, "nope", "train")], SCHEMA)
    got = bag.inputs(df, SPEC, keep=("id",))
    expected = spark.createDataFrame(
        [("a", ["title=portrait", "title=of", "title=a", "title=lady", "tags=figure", "kind=print"], 0.0, 2.0)],
        f"id string, {bag.TOKENS} array<string>, {bag.TARGET} double, size double")
    assertDataFrameEqual(got, expected)  # "nope" is no class: the row is left out


def test_figures_are_accuracy_and_unweighted_mean_of_each_class_f1(spark):
    pairs = spark.createDataFrame([(0.0, 0.0), (0.0, 0.0), (0.0, 1.0), (1.0, 1.0), (2.0, 0.0), (1.0, None)],
                                  "t double, p double")
    got = bag.figures(pairs, "t", "p", 3)
    assert got.rows == 6 and got.accuracy == pytest.approx(3 / 6)  # no prediction is a wrong one
    # F1: class 0 2*2/(3+3); class 1 2*1/(2+2); class 2 never predicted: 0
    assert got.macro_f1 == pytest.approx((4 / 6 + 2 / 4 + 0.0) / 3)


def sample(tmp_path) -> config.Config:
    """A config of the rows at tmp_path/rows.parquet, split by their `subset`, with SPEC."""
    path = tmp_path / "tiny.toml"
    path.write_text(f"""
[sources.rows]
format = "parquet"
path = "{tmp_path / 'rows.parquet'}"

[prepare]
main = "rows"
output = "{tmp_path / 'dataset'}"

[prepare.split]
mode = "column"
column = "subset"

[predict]
output = "{tmp_path / 'predictions'}"

[features.id]
kind = "key"
dtype = "string"

[features.title]
kind = "text"

[features.tags]
kind = "list"

[features.kind]
kind = "categorical"

[features.size]
kind = "numeric"

[features.period]
kind = "label"
task = "multiclass"
classes = {list(CLASSES)}
""")
    cfg = config.load(path)
    assert cfg.features == SPEC
    return cfg


def test_baseline_is_chosen_on_eval_and_scored_on_test_beside_the_model(spark, tmp_path):
    rows = table()
    spark.createDataFrame(rows, SCHEMA).write.parquet(str(tmp_path / "rows.parquet"))
    # a model right on every row but the test rows of class "odd", which it calls "old"
    predicted = [(r[0], "old" if r[5] == "odd" and r[6] == "test" else r[5]) for r in rows]
    spark.createDataFrame(predicted, f"id string, {predicted_label} string").write.parquet(str(tmp_path / "predictions"))
    lines: list[str] = []
    result = api.baseline(spark, config=sample(tmp_path), log=lines.append)
    assert result.rows == {"train": 144, "eval": 48, "test": 48}
    assert set(result.reg_params) == set(bag.REG_PARAMS)
    assert result.reg_params[result.reg_param] == max(result.reg_params.values())
    assert result.figures[job.BAG]["test"].accuracy == pytest.approx(1.0)  # the title, tags and size decide it
    assert result.figures[job.MODEL]["eval"].accuracy == pytest.approx(1.0)
    assert result.figures[job.MODEL]["test"].accuracy == pytest.approx(2 / 3)
    assert result.figures[job.MAJORITY]["test"].accuracy == pytest.approx(1 / 3)
    assert result.figures[job.MODEL]["test"].rows == 48
    assert any("CountVectorizer + IDF + LogisticRegression" in line and "1.0000" in line for line in lines)


def test_missing_predictions_and_a_label_that_is_not_multiclass_are_named(spark, tmp_path):
    spark.createDataFrame(table(30), SCHEMA).write.parquet(str(tmp_path / "rows.parquet"))
    cfg = sample(tmp_path)
    with pytest.raises(InputError, match="predictions .* tfos predict"):
        api.baseline(spark, config=cfg, log=lambda line: None)
    binary = cfg.with_settings({"features.period.task": "binary", "features.period.classes": [],
                                "features.period.positive": ["new"], "features.period.negative": ["old"]})
    with pytest.raises(ConfigError, match="multiclass label"):
        api.baseline(spark, config=binary, log=lambda line: None)
