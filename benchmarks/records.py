"""Runs recorded apart from the whole bench, shown in its report.

A stage run alone (`tfos bench --only P14`, `docs/benchmarks/p14.md`) and the SQL endpoint's load
tests (`docs/benchmarks/sql_load.md`) write their own pages beside the report's plots. The report
carries each one whole, as a section, so that docs/benchmarks.md holds every figure."""
from __future__ import annotations

import os
import posixpath
import re

LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def pages(out_dir: str) -> list[str]:
    """The pages recorded in the report's plots directory."""
    return sorted(os.path.join(out_dir, n) for n in os.listdir(out_dir) if n.endswith(".md")) \
        if os.path.isdir(out_dir) else []


def section(text: str, where: str, name: str) -> list[str]:
    """Page `name` as a section of the report: its title one level down, every heading after it
    too, and its relative links and images pointed from the report (`where`: the page's
    directory, relative to the report's)."""
    lines = text.rstrip("\n").splitlines()
    title = lines[0].lstrip("#").strip()
    out = [f"## {title}", "", f"Recorded apart, in [{name}]({where}/{name}):"]
    for line in lines[1:]:
        if line.startswith("#"):
            line = "#" + line
        out.append(LINK.sub(lambda m: m.group(1) + _from_report(m.group(2), where) + m.group(3), line))
    return out + [""]


def _from_report(target: str, where: str) -> str:
    if re.match(r"(https?:|mailto:|#|/)", target):
        return target
    return posixpath.normpath(posixpath.join(where, target))


def embedded(out_dir: str, where: str) -> list[str]:
    """Every recorded page under `out_dir` as sections of the report."""
    out: list[str] = []
    for path in pages(out_dir):
        with open(path, encoding="utf-8") as fh:
            out += section(fh.read(), where, os.path.basename(path))
    return out


TUNING = "\n## Tuning: "  # the report's section that the recorded pages come before


def refresh(report: str) -> None:
    """Put the pages recorded beside `report` into it again, in place of those it carried: after
    a stage run alone or the load tests, without running the whole bench."""
    with open(report, encoding="utf-8") as fh:
        head, tail = fh.read().split(TUNING, 1)
    kept = [part for part in re.split(r"(?m)^(?=## )", head) if not _recorded(part)]
    out_dir = os.path.splitext(report)[0]
    pages_text = "".join(f"{line}\n" for line in embedded(out_dir, os.path.basename(out_dir)))
    with open(report, "w", encoding="utf-8") as fh:
        fh.write("".join(kept).rstrip("\n") + "\n\n" + pages_text + TUNING.lstrip("\n") + tail)


def _recorded(part: str) -> bool:
    """Whether a section of the report is a page recorded apart (`section`)."""
    lines = part.splitlines()
    return part.startswith("## ") and len(lines) > 2 and lines[2].startswith("Recorded apart, in [")


if __name__ == "__main__":  # python -m benchmarks.records [docs/benchmarks.md]
    import sys

    from benchmarks.arguments import DEFAULT_OUTPUT

    refresh(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUTPUT)
