"""`tfos baseline`: a classifier's predictions beside what a data scientist tries first on the same
rows (`data.bag_baseline`: a bag of words and list elements, IDF, logistic regression, in Spark ML)
and beside the majority class, on each split the rows' own split gives.

The rows are the config's (its `[prepare]` sources and joins, as prepare reads them), each in the
split prepare puts it in (`prepare.split`; by hash, the nominal boundary). The baseline is fitted on
train, its `regParam` chosen on eval, and scored once on test; the model's figures come from the
predictions `tfos predict` wrote (`predict.output`: the key and `predicted_label`), joined to the
rows by the key (a row without a prediction counts as wrong). Nothing is written: the figures are printed and returned."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.dataset import ALL_SPLITS, Split
from tfos_jobs.data import bag_baseline as bag
from tfos_jobs.data import columns, sources
from tfos_jobs.data import split as split_mod
from tfos_jobs.data.assemble import assemble
from tfos_jobs.errors import ConfigError, InputError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.tasks import Task

MODEL, BAG, MAJORITY = "model", "bag_of_words", "majority_class"
TITLES = {MAJORITY: "majority class (train's most frequent)",
          BAG: "CountVectorizer + IDF + LogisticRegression",
          MODEL: "the model (predict.output)"}
MODEL_PREDICTED = "_model_predicted"


@dataclass(frozen=True)
class Comparison:
    """Rows per split; the baseline's eval accuracy for each `regParam` tried and the one kept; and
    each classifier's figures (MAJORITY, BAG, MODEL) per split ("eval", "test")."""

    rows: dict[str, int]
    reg_params: dict[float, float]
    reg_param: float
    figures: dict[str, dict[str, bag.Figures]] = field(default_factory=dict)


def run(spark: SparkSession, config: Config, predictions: str, log: Callable[[str], None] = print) -> Comparison:
    spec = config.features
    if spec.is_sequence or spec.key is None or not spec.of_kind("label") \
            or spec.label.task != Task.MULTICLASS.value:
        raise ConfigError("tfos baseline compares classifiers of rows: the spec needs a key and a multiclass label")
    key = spec.key.name
    table, _ = assemble(spark, config)
    labelled = table.withColumn(columns.SPLIT, split_mod.assign(config.prepare.split, key))
    rows = bag.inputs(labelled, spec, keep=(key, columns.SPLIT))
    train = rows.where(F.col(columns.SPLIT) == Split.TRAIN.value)
    rows = bag.featurizer(spec).fit(train).transform(rows).select(key, columns.SPLIT, bag.TARGET, bag.FEATURES).cache()
    try:
        counts = {r[0]: int(r[1]) for r in rows.groupBy(columns.SPLIT).count().collect() if r[0] is not None}
        missing = [s for s in (Split.TRAIN.value, Split.EVAL.value) if not counts.get(s)]
        if missing:
            raise InputError(f"no labelled row is in split(s) {missing} (prepare.split): the baseline needs train and eval")
        scored = [s for s in ALL_SPLITS if s != Split.TRAIN.value and counts.get(s)]
        by_split = {s: rows.where(F.col(columns.SPLIT) == s) for s in ALL_SPLITS}
        model = _model_rows(spark, predictions, rows, key, spec)  # read (and checked) before the fits
        result = _baseline(by_split, scored, spec, counts, log)
        majority = _majority(by_split[Split.TRAIN.value])
        for s in scored:
            result.figures.setdefault(MAJORITY, {})[s] = bag.figures(
                by_split[s].withColumn(bag.PREDICTED, F.lit(majority)), bag.TARGET, bag.PREDICTED,
                len(spec.label.classes))
            result.figures.setdefault(MODEL, {})[s] = bag.figures(
                model.where(F.col(columns.SPLIT) == s), bag.TARGET, MODEL_PREDICTED, len(spec.label.classes))
    finally:
        rows.unpersist()
    for line in describe(result):
        log(line)
    return result


def _baseline(by_split: dict[str, DataFrame], scored: list[str], spec: FeatureSpec, counts: dict[str, int],
              log: Callable[[str], None]) -> Comparison:
    """The baseline fitted on train for each `regParam`, the best on eval kept, scored on the other splits."""
    train, held = by_split[Split.TRAIN.value], by_split[Split.EVAL.value]
    on_eval, fitted = {}, {}
    for reg in bag.REG_PARAMS:
        fitted[reg] = bag.classifier(reg).fit(train)
        on_eval[reg] = bag.score(fitted[reg], held, spec).accuracy
        log(f"baseline regParam {reg}: eval accuracy {on_eval[reg]:.4f}")
    best = max(bag.REG_PARAMS, key=lambda r: on_eval[r])  # the first of the best on ties
    result = Comparison(rows=dict(counts), reg_params=on_eval, reg_param=best)
    result.figures[BAG] = {s: bag.score(fitted[best], by_split[s], spec) for s in scored}
    return result


def _majority(train: DataFrame) -> float:
    top = train.groupBy(bag.TARGET).count().orderBy(F.desc("count"), bag.TARGET).first()
    assert top is not None  # train holds rows (checked before)
    return float(top[bag.TARGET])


def _model_rows(spark: SparkSession, predictions: str, rows: DataFrame, key: str, spec: FeatureSpec) -> DataFrame:
    """The rows' key, split and class index beside the model's predicted class index (null when the
    predictions lack the row: counted as wrong)."""
    try:
        predicted = spark.read.parquet(predictions)
    except AnalysisException as e:
        raise InputError(f"predictions {predictions!r}: {sources.explain(e)} (write them with tfos predict)") from None
    label = contract.predicted(contract.LABEL)
    missing = [c for c in (key, label) if c not in predicted.columns]
    if missing:
        raise InputError(f"predictions {predictions!r} lack column(s) {missing}: write them with tfos predict")
    classes = F.array(*[F.lit(c) for c in spec.label.classes])
    index = (F.array_position(classes, F.col(label)) - 1).cast("double")
    return rows.select(key, columns.SPLIT, bag.TARGET).join(
        predicted.select(key, index.alias(MODEL_PREDICTED)), key, "left")


def describe(result: Comparison) -> list[str]:
    """The figures as console lines, one classifier a line, accuracy and macro F1 per split."""
    splits = [s for s in ALL_SPLITS if s in next(iter(result.figures.values()), {})]
    rows = ", ".join(f"{s} {result.rows.get(s, 0):,}" for s in ALL_SPLITS)
    lines = [f"rows: {rows}; the baseline's regParam chosen on eval: {result.reg_param}",
             f"  {'classifier':<44}" + "".join(f" {s + ' acc':>10} {s + ' F1':>9}" for s in splits)]
    for name in (MAJORITY, BAG, MODEL):
        figures = result.figures.get(name, {})
        lines.append(f"  {TITLES[name]:<44}" + "".join(
            f" {figures[s].accuracy:>10.4f} {figures[s].macro_f1:>9.4f}" for s in splits))
    return lines
