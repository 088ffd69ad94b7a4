"""Malformed CSV and JSON rows: set aside and counted, or the job fails naming file and line."""
from __future__ import annotations

import pytest

from tfos_jobs import config
from tfos_jobs.data import dataset
from tfos_jobs.jobs import prepare
from tfos_jobs.errors import InputError

CSV = """person_id,age,job,income
1,30,a,>50K
2,thirty,b,<=50K
3,40,c
4,50,d,>50K,extra
""" + "".join(f"{i},{20 + i % 40},j{i % 3},{'>50K' if i % 4 == 0 else '<=50K'}\n" for i in range(5, 105))

JSON = ('{"person_id": 1, "age": 30, "job": "a", "income": ">50K"}\n'
        '{"person_id": 2, "age": 31, "job": "b", "income": "<=50K"\n'
        + "".join(f'{{"person_id": {i}, "age": {20 + i % 40}, "job": "j{i % 3}", "income": "{">50K" if i % 4 == 0 else "<=50K"}"}}\n'
                  for i in range(3, 103)))

TOML = """
[sources.people]
format = "{fmt}"
path = "{path}"
schema = "person_id BIGINT, age INT, job STRING, income STRING"
[prepare]
main = "people"
output = "{out}"
files_per_split = 1
bad_rows = "{mode}"
[features.person_id]
kind = "key"
[features.age]
kind = "numeric"
[features.job]
kind = "categorical"
max_length = 2
[features.income]
kind = "label"
positive = [">50K"]
negative = ["<=50K"]
"""


def load(tmp_path, fmt: str, text: str, mode: str = "quarantine"):
    data = tmp_path / f"people.{fmt}"
    data.write_text(text)
    conf = tmp_path / "c.toml"
    conf.write_text(TOML.format(fmt=fmt, path=data, out=tmp_path / "out", mode=mode))
    return config.load(conf)


def test_malformed_csv_rows_are_quarantined_with_reason_and_file(spark, tmp_path):
    manifest = prepare.run(spark, load(tmp_path, "csv", CSV)).to_dict()
    malformed = "malformed input row (it does not parse as the source's schema)"
    assert manifest["rejected"]["by_reason"] == {malformed: 3}
    rejects = spark.read.json(str(tmp_path / "out" / "_rejects")).orderBy("_raw_record").collect()
    assert [r["_raw_record"] for r in rejects] == ["2,thirty,b,<=50K", "3,40,c", "4,50,d,>50K,extra"]
    assert all(r["_source_file"].endswith("people.csv") and r["_reject_reason"] == malformed for r in rejects)
    assert manifest["splits"]["train"]["records"] + manifest["splits"]["eval"]["records"] == 101


def test_strict_mode_names_the_file_and_line(spark, tmp_path):
    with pytest.raises(InputError) as err:
        prepare.run(spark, load(tmp_path, "csv", CSV, mode="strict"))
    assert "people.csv, line 3: '2,thirty,b,<=50K'" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_broken_json_is_quarantined_and_strict_names_it(spark, tmp_path):
    manifest = prepare.run(spark, load(tmp_path, "json", JSON)).to_dict()
    assert sum(manifest["rejected"]["by_reason"].values()) == 1
    with pytest.raises(InputError, match=r"people.json, line 2: '\{\"person_id\": 2"):
        prepare.run(spark, load(tmp_path, "json", JSON, mode="strict"), overwrite=True)


def test_oversize_strings_are_truncated_and_counted(spark, tmp_path):
    text = CSV.replace("1,30,a,>50K", "1,30,abcdef,>50K")
    manifest = prepare.run(spark, load(tmp_path, "csv", text)).to_dict()
    assert manifest["truncated"] == {"job": 1}
    m = dataset.read(str(tmp_path / "out"))
    assert "ab" in m.vocab["job"] and "abcdef" not in m.vocab["job"]
