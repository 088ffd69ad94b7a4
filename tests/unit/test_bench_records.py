"""Pages recorded apart from the bench (a stage run alone, the SQL load tests) as sections of
docs/benchmarks.md: headings one level down, links and images still pointing at their files."""
from __future__ import annotations

from pathlib import Path

from benchmarks import records

ROOT = Path(__file__).resolve().parents[2]


def test_a_page_becomes_a_section_whose_links_resolve_from_the_report():
    page = ("# Benchmarks: P14 alone\n\nWritten by `tfos bench`.\n\n| id | what |\n|---|---|\n| P14a | x |\n\n"
            "## 100x the people (P14)\n\n![P14](p14/hundredfold.png) [test](../../tests/serving/test_sql_load.py) "
            "[web](https://example.org/a) [here](#part)\n")
    assert records.section(page, "benchmarks", "p14.md") == [
        "## Benchmarks: P14 alone", "", "Recorded apart, in [p14.md](benchmarks/p14.md):", "",
        "Written by `tfos bench`.", "", "| id | what |", "|---|---|", "| P14a | x |", "",
        "### 100x the people (P14)", "",
        "![P14](benchmarks/p14/hundredfold.png) [test](../tests/serving/test_sql_load.py) "
        "[web](https://example.org/a) [here](#part)", ""]


def test_every_page_recorded_apart_is_a_section_of_the_report():
    report = (ROOT / "docs" / "benchmarks.md").read_text()
    names = [p.name for p in (ROOT / "docs" / "benchmarks").glob("*.md")]
    assert "p14.md" in names
    for name in names:
        assert f"Recorded apart, in [{name}](benchmarks/{name}):" in report
