"""Reader for the real UCI Adult census files (adult.data, adult.test).

They have no header, ", " separators, "?" for missing values; adult.test starts with the line "|1x3 Cross validator" and
its labels end in "." (">50K."). The reader returns the same columns as the embedded `people` table, plus a
deterministic `person_id` (a hash of the row) and `source_split` ("test" for rows from a file whose name ends in
".test", else "train"), so the canonical train/test split is kept with `prepare.split.mode = "column"` and the eval
split is drawn from the train file (`prepare.split.eval_from_train`)."""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.contracts.dataset import Split
from tfos_jobs.data.columns import CORRUPT, SOURCE_FILE

COLUMNS = (
    ("age", "INT"), ("workclass", "STRING"), ("fnlwgt", "INT"), ("education", "STRING"),
    ("education_num", "INT"), ("marital_status", "STRING"), ("occupation", "STRING"),
    ("relationship", "STRING"), ("race", "STRING"), ("sex", "STRING"), ("capital_gain", "INT"),
    ("capital_loss", "INT"), ("hours_per_week", "INT"), ("native_country", "STRING"), ("income", "STRING"),
)
SCHEMA = ", ".join(f"{name} {dtype}" for name, dtype in COLUMNS) + f", {CORRUPT} STRING"


def read(spark: SparkSession, paths: list[str]) -> DataFrame:
    raw = spark.read.csv(
        paths, schema=SCHEMA, sep=",", ignoreLeadingWhiteSpace=True, ignoreTrailingWhiteSpace=True,
        nullValue="?", comment="|", mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT,
    )
    names = [name for name, _ in COLUMNS]
    return raw.select(
        F.xxhash64(*[F.coalesce(F.col(c).cast("string"), F.lit("?")) for c in names]).alias("person_id"),
        *[F.regexp_replace("income", r"\.$", "").alias(c) if c == "income" else F.col(c) for c in names],
        F.when(F.input_file_name().endswith(".test"), Split.TEST.value).otherwise(Split.TRAIN.value).alias("source_split"),
        F.col(CORRUPT),
        F.input_file_name().alias(SOURCE_FILE),
    )
