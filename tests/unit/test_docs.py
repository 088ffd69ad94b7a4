"""The docs against the tree they describe: every relative link resolves, development.md's layout
names real paths and every package, the contract list names every contract module, and no doc
types the suite's size by hand. No Spark."""
from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = {ROOT / "docs" / "benchmarks.md"}  # written by `make bench`: a record of one run
DEVELOPMENT = ROOT / "docs" / "development.md"
PACKAGE_ROOTS = ("tfos_jobs", "udfs", "benchmarks")
REPO_FOLDERS = ("tfos_jobs", "udfs", "benchmarks", "tests", "scripts", "conf", "jvm", "examples", "build_support")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def prose(text: str) -> str:
    """`text` without fenced code blocks, and with inline code spans reduced to a word, so that
    brackets in code never read as links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "code", text)


# -- links ---------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def broken_links(text: str, base: Path) -> list[str]:
    """Relative link targets in `text` (a page in the directory `base`) that name no file or
    directory; web and mail links and links within the page are not checked, anchors are ignored."""
    out = []
    for match in LINK.finditer(prose(text)):
        target = match.group(1)
        if re.match(r"(https?:|mailto:|#)", target):
            continue
        if not (base / target.split("#")[0]).exists():
            out.append(target)
    return out


def test_every_relative_link_in_the_docs_resolves():
    assert len(DOCS) > 10
    found = [f"{rel(doc)}: {target}" for doc in DOCS for target in broken_links(doc.read_text(), doc.parent)]
    assert found == []
    planted = ("[a](docs/demo.md) [b](docs/nothing.md#part) [c](https://example.org/x) [d](#layout)\n"
               "[e](tests/unit/) [`f`](nowhere/) `[g](in/code.md)`\n```\n[h](in/a/block.md)\n```\n"
               "![i](docs/missing.png)")
    assert broken_links(planted, ROOT) == ["docs/nothing.md#part", "nowhere/", "docs/missing.png"]


def stale_paths(text: str) -> list[str]:
    """Repository paths written as inline code (`tfos_jobs/...`, `tests/...`) that do not exist."""
    folders = "|".join(REPO_FOLDERS)
    spans = re.findall(rf"`((?:{folders})/[\w./-]*)", text)
    return [span for span in spans if not (ROOT / span.rstrip(".")).exists()]


def test_repository_paths_named_in_the_docs_exist():
    assert [f"{rel(doc)}: {path}" for doc in DOCS if doc not in GENERATED for path in stale_paths(doc.read_text())] == []
    assert stale_paths("`tests/unit/test_docs.py`, `conf/*.toml`, `tfos_jobs/gone.py`") == ["tfos_jobs/gone.py"]


# -- the layout ----------------------------------------------------------------------------------

@dataclass
class Entry:
    line: int
    path: str  # from the repository's root, "/" at the end for a directory
    description: str


def layout_block(text: str) -> str:
    """The code block under a page's "## Layout" heading."""
    section = text.split("\n## Layout\n", 1)[1]
    match = re.search(r"^```\n(.*?)^```", section, re.S | re.M)
    assert match, "no code block under ## Layout"
    return match.group(1)


def layout_entries(block: str) -> tuple[list[Entry], list[str]]:
    """The entries of a layout block, and what is wrong with its shape.

    An entry is a line indented at most two spaces more than the entry before it; its first word
    is a path, relative to the nearest directory entry above it with less indentation. A line
    indented further carries on the description of the entry above."""
    entries: list[Entry] = []
    problems: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, path) of the entries that enclose the next one
    for number, line in enumerate(block.splitlines(), 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if entries and indent > stack[-1][0] + 2:
            entries[-1].description += " " + line.strip()
            continue
        name, _, description = line.strip().partition(" ")
        name = name.rstrip(",")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        if parent and not parent.endswith("/"):
            problems.append(f"line {number}: {name} is indented under a file, {parent}")
            parent += "/"
        entries.append(Entry(number, parent + name, description.strip()))
        stack.append((indent, parent + name))
    return entries, problems


def layout_problems(block: str, root: Path) -> list[str]:
    """Entries of a layout block that name no path under `root`, and `*.py` names in a description
    found neither beside the entry (in it, for a directory) nor from the root."""
    entries, problems = layout_entries(block)
    for entry in entries:
        if not (root / entry.path).exists():
            problems.append(f"line {entry.line}: {entry.path} does not exist")
        here = entry.path if entry.path.endswith("/") else str(Path(entry.path).parent)
        for module in re.findall(r"(?<![\w./])([\w/]+\.py)\b", entry.description):
            if not ((root / here / module).exists() or (root / module).exists()):
                problems.append(f"line {entry.line}: {module}, named under {entry.path}, does not exist")
    return problems


def packages(root: Path) -> set[str]:
    """Every package directory of the package roots, as a layout entry names it."""
    return {rel(init.parent) + "/" for top in PACKAGE_ROOTS for init in (root / top).rglob("__init__.py")
            if "__pycache__" not in init.parts}


def unlisted_packages(block: str, root: Path) -> list[str]:
    listed = {entry.path for entry in layout_entries(block)[0]}
    return sorted(packages(root) - listed)


def test_the_layout_names_real_paths_and_every_package():
    block = layout_block(DEVELOPMENT.read_text())
    assert layout_problems(block, ROOT) == []
    assert unlisted_packages(block, ROOT) == []
    assert {"tfos_jobs/cluster/node/", "benchmarks/stages/", "udfs/"} <= packages(ROOT)
    assert layout_problems(layout_block((ROOT / "README.md").read_text()), ROOT) == []


def test_the_layout_check_finds_what_is_wrong():
    planted = ("tfos_jobs/        the package\n"
               "  names.py        the names; errors.py, gone.py: more\n"
               "  jobs/           the jobs\n"
               "    train/        training\n"
               "      executor/   moved away\n"
               "    __init__.py   the package, carried on\n"
               "                  over this line, which names nothing.py\n"
               "  config/         settings\n"
               "Dockerfile        the image\n"
               "  inner.py        under a file\n")
    assert layout_problems(planted, ROOT) == [
        "line 10: inner.py is indented under a file, Dockerfile",
        "line 2: gone.py, named under tfos_jobs/names.py, does not exist",
        "line 5: tfos_jobs/jobs/train/executor/ does not exist",
        "line 6: nothing.py, named under tfos_jobs/jobs/__init__.py, does not exist",
        "line 10: Dockerfile/inner.py does not exist"]
    entries, _ = layout_entries(planted)
    assert [e.path for e in entries][:4] == ["tfos_jobs/", "tfos_jobs/names.py", "tfos_jobs/jobs/", "tfos_jobs/jobs/train/"]
    missing = unlisted_packages(planted, ROOT)
    assert "tfos_jobs/cluster/" in missing and "tfos_jobs/jobs/train/" not in missing


# -- the contract list -----------------------------------------------------------------------------

def contract_list_problems(docstring: str, modules: set[str]) -> list[str]:
    """Modules the list does not name (the first word of a line), and names it lists (a word, two
    or more spaces, a description) that are no module."""
    lines = [line for line in docstring.splitlines() if line.strip()]
    first_words = {line.split()[0] for line in lines}
    listed = {m.group(1) for line in lines if (m := re.match(r"(\w+) {2,}\S", line))}
    return ([f"{m}: not in the list" for m in sorted(modules - first_words)]
            + [f"{n}: listed, but no such module" for n in sorted(listed - modules)])


def test_the_contract_list_names_every_contract_module():
    package = ROOT / "tfos_jobs" / "contracts"
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
    assert docstring
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    assert "dataset" in modules
    assert contract_list_problems(docstring, modules) == []
    planted = "Contracts between the parts:\n\ndataset   a dataset\nghost     gone\n"
    assert contract_list_problems(planted, {"dataset", "metrics"}) == [
        "metrics: not in the list", "ghost: listed, but no such module"]


# -- figures the suite reports itself --------------------------------------------------------------

HAND_COUNT = re.compile(r"\b\d[\d,]{2,} tests\b")


def test_no_doc_states_the_size_of_the_suite_by_hand():
    found = [f"{rel(doc)}: {m.group(0)}" for doc in DOCS if doc not in GENERATED
             for m in HAND_COUNT.finditer(doc.read_text())]
    assert found == []
    assert HAND_COUNT.findall("runs the suite (409 tests in about 19 minutes); 1,204 tests") == ["409 tests", "1,204 tests"]
    assert HAND_COUNT.findall("two tests, 12 tests, the tests") == []


def test_development_names_every_marker_of_the_suite():
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    names = [marker.split(":")[0] for marker in markers]
    assert "slow" in names
    text = DEVELOPMENT.read_text()
    assert [name for name in names if f"`{name}`" not in text] == []


# -- the guarantees table ----------------------------------------------------------------------------

TABLE_ROW = re.compile(r"^\|.*\[[^\]]*\]\(\.\./(tests/[^)]+\.py)\) `(test_\w+)`(?: \((slow|k8s)\))? \|$", re.M)


def marks_of(module: Path, name: str) -> set[str] | None:
    """The marks of test `name` in `module` that choose its make target (slow, k8s): its own and
    its module's, None when the module defines no such test."""
    tree = ast.parse(module.read_text())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        return None
    marks = set()
    for node in [*(n.value for n in tree.body if isinstance(n, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)),
                 *found[0].decorator_list]:
        marks |= {m for m in ("slow", "k8s") if f"mark.{m}" in ast.unparse(node)}
    if module.parent.name == "k8s":
        marks.add("k8s")
    return marks


def guarantee_problems(text: str) -> list[str]:
    section = text.split("### Guarantees, tested", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| fault")]
    problems = [f"not a row of fault, what is seen, what is kept, [file](path) `test`: {ln[:60]}"
                for ln in rows if not TABLE_ROW.match(ln)]
    for path, name, mark in TABLE_ROW.findall(section):
        marks = marks_of(ROOT / path, name)
        if marks is None:
            problems.append(f"{path}: no {name}")
        elif marks != ({mark} if mark else set()):
            problems.append(f"{path}::{name}: marked {sorted(marks) or 'neither slow nor k8s'}, said {mark or 'neither'}")
    return problems


def test_every_guarantee_names_a_test_that_exists_with_its_marks():
    text = (ROOT / "docs" / "operations.md").read_text()
    assert len(TABLE_ROW.findall(text)) >= 15
    assert guarantee_problems(text) == []
    planted = ("### Guarantees, tested\n| f | s | k | [a](../tests/reliability/test_training_faults.py) "
               "`test_a_hung_step_fails_the_run_within_the_step_timeout` |\n"
               "| f | s | k | [a](../tests/reliability/test_training_faults.py) `test_gone` (slow) |\n| no test |\n")
    assert guarantee_problems(planted) == [
        "not a row of fault, what is seen, what is kept, [file](path) `test`: | no test |",
        "tests/reliability/test_training_faults.py::test_a_hung_step_fails_the_run_within_the_step_timeout: "
        "marked ['slow'], said neither",
        "tests/reliability/test_training_faults.py: no test_gone"]
