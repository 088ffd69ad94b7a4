"""The classifier a data scientist tries first on rows with texts and lists, in Spark ML, against
which a trained model of the same rows is judged:

  * every text's words (the package's own tokenizer, `features.text.spark_words`), every list's
    elements and every categorical's value, each prefixed with its feature's name, as one bag of
    tokens: `CountVectorizer` (the `VOCAB_SIZE` most frequent tokens of the train rows) then `IDF`;
  * the numeric features beside it, nulls filled with their train mean (`Imputer`), standardised;
  * a multinomial `LogisticRegression`, its `regParam` chosen among `REG_PARAMS` on the eval rows.

The splits are the rows' own (the prepare split's column): fitted on train, chosen on eval, scored
once on test. The figures are accuracy and macro F1 (each class's F1, averaged unweighted)."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.ml import Pipeline
from pyspark.ml.classification import LogisticRegression, LogisticRegressionModel
from pyspark.ml.feature import IDF, CountVectorizer, Imputer, StandardScaler, VectorAssembler
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.features.text import spark_elements, spark_words

VOCAB_SIZE = 20_000
REG_PARAMS = (0.0, 0.01, 0.1)
MAX_ITER = 100
TARGET = "_baseline_target"  # the label's class index, as a double
PREDICTED = "_baseline_predicted"  # the predicted class index
TOKENS, COUNTS, WEIGHTED = "_baseline_tokens", "_baseline_counts", "_baseline_idf"
NUMBERS, FILLED, SCALED, FEATURES = "_baseline_numbers", "_baseline_filled_", "_baseline_scaled", "_baseline_features"


@dataclass(frozen=True)
class Figures:
    """A classifier's figures on one split's rows."""

    rows: int
    accuracy: float
    macro_f1: float


def target(spec: FeatureSpec) -> Column:
    """The label's class index (0-based, in the spec's `classes` order) as a double; null for a
    value that is not a class."""
    classes = spec.label.classes
    position = F.array_position(F.array(*[F.lit(c) for c in classes]), F.col(spec.label.name).cast("string"))
    return F.when(position > 0, (position - 1).cast("double"))


def tokens(spec: FeatureSpec) -> Column:
    """array<string>: the row's words, list elements and categorical values, as `name=token`."""
    def named(name: str, values: Column) -> Column:
        return F.transform(values, lambda v: F.concat(F.lit(f"{name}="), v))

    bags = [named(f.name, spark_words(F.col(f.name)) if f.kind == "text" else spark_elements(F.col(f.name)))
            for f in spec.bags]
    bags += [named(f.name, F.array(F.coalesce(F.col(f.name).cast("string"), F.lit(f.default))))
             for f in spec.categorical]
    return F.concat(*bags) if bags else F.array().cast("array<string>")


def featurizer(spec: FeatureSpec) -> Pipeline:
    """The stages that make `FEATURES` of rows with `TOKENS` and the numeric features as doubles;
    fitted once, on train, whatever the regParam."""
    numeric = [f.name for f in spec.numeric]
    stages: list = [CountVectorizer(inputCol=TOKENS, outputCol=COUNTS, vocabSize=VOCAB_SIZE),
                    IDF(inputCol=COUNTS, outputCol=WEIGHTED)]
    inputs = [WEIGHTED]
    if numeric:
        filled = [FILLED + n for n in numeric]
        stages += [Imputer(inputCols=numeric, outputCols=filled, strategy="mean"),
                   VectorAssembler(inputCols=filled, outputCol=NUMBERS),
                   StandardScaler(inputCol=NUMBERS, outputCol=SCALED, withMean=True, withStd=True)]
        inputs.append(SCALED)
    return Pipeline(stages=[*stages, VectorAssembler(inputCols=inputs, outputCol=FEATURES)])


def classifier(reg_param: float) -> LogisticRegression:
    """The logistic regression of `FEATURES` and `TARGET`, multinomial."""
    return LogisticRegression(featuresCol=FEATURES, labelCol=TARGET, predictionCol=PREDICTED, regParam=reg_param,
                              maxIter=MAX_ITER, family="multinomial")


def inputs(rows: DataFrame, spec: FeatureSpec, keep: tuple[str, ...] = ()) -> DataFrame:
    """`rows` as the pipeline takes them: the columns of `keep`, `TOKENS`, `TARGET` (rows without a
    class left out), and the numeric features as doubles."""
    columns: list[Column | str] = [*keep, tokens(spec).alias(TOKENS), target(spec).alias(TARGET),
               *[F.col(f.name).cast("double").alias(f.name) for f in spec.numeric]]
    return rows.select(*columns).where(F.col(TARGET).isNotNull())


def figures(pairs: DataFrame, truth: str, predicted: str, classes: int) -> Figures:
    """Accuracy and macro F1 of `pairs` (class indices in `truth` and `predicted`, a null
    prediction wrong), from their confusion counts (classes x classes rows reach the driver)."""
    none = F.lit(-1)  # no prediction: wrong, whatever the truth
    counts = {(int(r[0]), int(r[1])): int(r[2]) for r in pairs.groupBy(
        F.col(truth).cast("int"), F.coalesce(F.col(predicted).cast("int"), none)).count().collect()}
    rows = sum(counts.values())
    if not rows:
        return Figures(0, float("nan"), float("nan"))
    right = sum(n for (t, p), n in counts.items() if t == p)
    f1 = []
    for c in range(classes):
        hit = counts.get((c, c), 0)
        said = sum(n for (_, p), n in counts.items() if p == c)
        true = sum(n for (t, _), n in counts.items() if t == c)
        f1.append(2 * hit / (said + true) if said + true else 0.0)
    return Figures(rows, right / rows, sum(f1) / classes)


def score(model: LogisticRegressionModel, rows: DataFrame, spec: FeatureSpec) -> Figures:
    """`model`'s figures on `rows` (with `FEATURES` and `TARGET`)."""
    return figures(model.transform(rows), TARGET, PREDICTED, len(spec.label.classes))
