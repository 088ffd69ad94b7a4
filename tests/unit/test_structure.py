"""The package's own rules about structure, checked on its source. Each test checks one:

names with one owner   a private name is not imported; model-directory file names, strategies,
                       roles, tasks, model kinds and splits are typed only by their owner module
no shared disk         nothing on the driver or a node shares a file with the other
imports                no two modules, no two packages import each other; no module imports from
                       a higher layer (LAYERS); every imported name exists; the command line
                       imports the API, not what the API is made of (CLI_IMPORTS)
the layout             each folder holds one kind of thing (FOLDERS), the package's root only the
                       modules ROOT_MODULES names; spark-submit's entry points are together in
                       entrypoints/; only storage/ reaches Hadoop's FileSystem, everyone else
                       goes through `Storage`; sweeps start trials only through the launcher seam;
                       only cluster/node/tfos_cluster.py imports TensorFlowOnSpark
size                   modules and functions are small, and hold code, not prose
typed settings         a config is changed by `--set` strings only on the command line (SET_STRINGS)
"""
from __future__ import annotations

import ast
from pathlib import Path

from tfos_jobs.contracts.dataset import Split
from tfos_jobs.tasks import ModelKind, Task
from tfos_jobs.topology import Role, Strategy

from tests.conftest import ROOT

PACKAGES = ("tfos_jobs", "udfs")


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                found += [f"{path.relative_to(ROOT)}: from {node.module} import {a.name}"
                          for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert len(sources()) > 50
    assert found == []


def test_model_directory_file_names_are_typed_only_by_their_owner():
    """The files of a model directory are named in contracts/model_dir.py alone."""
    owner = ROOT / "tfos_jobs" / "contracts" / "model_dir.py"
    names = ('/progress.jsonl"', '/metrics.json"', '/_run"', '/backup"', '/sample_predictions.json"')
    offenders = [f"{p.relative_to(ROOT)}: {n}" for p in sources() if p != owner
                 for n in (*names, '/saved_model"') if n in p.read_text()]
    assert all(n in owner.read_text() for n in names)
    assert offenders == []


def test_nothing_on_the_driver_or_a_node_shares_a_file_with_the_other():
    """A cluster shares no disk: the control channel carries everything between driver and nodes,
    so no module opens a model, run or dataset path with Python's file calls or TensorFlow's gfile
    except the storage layer (driver) and the node's own workspace."""
    allowed = {"tfos_jobs/storage/__init__.py", "tfos_jobs/storage/hadoop.py", "tfos_jobs/contracts/workspace.py",
               "tfos_jobs/cluster/node/inputs.py"}
    found = []
    for path in sources():
        rel = str(path.relative_to(ROOT))
        if rel in allowed:
            continue
        text = path.read_text()
        found += [f"{rel}: {call}" for call in ("tf.io.gfile", "gfile.GFile", "glob.glob(") if call in text]
    assert found == []


# -- names with one owner ----------------------------------------------------------------------

OWNERS = {
    **{s.value: "tfos_jobs/topology.py" for s in (*Strategy, *Role)},
    **{t.value: "tfos_jobs/tasks.py" for t in (*Task, *ModelKind)},
    **{s.value: "tfos_jobs/contracts/dataset.py" for s in Split},
}
# Where one of these words means something else, and what it means there.
OTHER_MEANINGS = {
    ("tfos_jobs/cli/parser.py", "train"): "the command",
    ("tfos_jobs/cli/commands.py", "train"): "the command",
    ("tfos_jobs/entrypoints/train.py", "train"): "the command this entry point runs",
    ("tfos_jobs/deploy/submit.py", "train"): "the command, whose model module is shipped with --py-files",
    ("tfos_jobs/deploy/kubernetes.py", "train"): "a command whose executors host TensorFlow",
    ("tfos_jobs/jobs/train/driver/tracked.py", "train"): "the command, as the run's tag and name",
    ("tfos_jobs/jobs/sweep/driver/job.py", "train"): "the [train] section of the config, kept in sweep.json",
    ("tfos_jobs/api/training.py", "train"): "the [train] section of the config, named in errors",
    ("tfos_jobs/api/__init__.py", "train"): "the API's function of that name, in __all__",
    ("tfos_jobs/jobs/train/driver/job.py", "test"): "the chief's result's key (contracts.metrics.ChiefResult)",
    ("tfos_jobs/config/serve_sql.py", "binary"): "HiveServer2's binary (TCP) transport, beside http",
}


def retyped_names(where: str, source: str) -> list[str]:
    """String literals in `source` (the module `where`) that spell a strategy, role, task, model
    kind or split instead of taking it from its owner."""
    nodes = sorted((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
                    and isinstance(n.value, str) and n.value in OWNERS), key=lambda n: (n.lineno, n.col_offset))
    return [f"{where}:{n.lineno}: {n.value!r} (owned by {OWNERS[n.value]})" for n in nodes
            if where != OWNERS[n.value] and (where, n.value) not in OTHER_MEANINGS]


def test_strategy_role_task_and_split_names_are_typed_only_by_their_owners():
    assert [f for p in sources() for f in retyped_names(rel(p), p.read_text())] == []
    # a name typed again is found, wherever it stands
    planted = 'if args.strategy == "parameter_server":\n    role = {"chief": 0}["chief"]\nsplit = ("train", "eval")\n'
    assert retyped_names("tfos_jobs/x.py", planted) == [
        "tfos_jobs/x.py:1: 'parameter_server' (owned by tfos_jobs/topology.py)",
        "tfos_jobs/x.py:2: 'chief' (owned by tfos_jobs/topology.py)",
        "tfos_jobs/x.py:2: 'chief' (owned by tfos_jobs/topology.py)",
        "tfos_jobs/x.py:3: 'train' (owned by tfos_jobs/contracts/dataset.py)",
        "tfos_jobs/x.py:3: 'eval' (owned by tfos_jobs/contracts/dataset.py)"]
    assert retyped_names("tfos_jobs/tasks.py", 'REGRESSION = "regression"') == []


# -- imports -----------------------------------------------------------------------------------

def imported(path: Path, known: set[str]) -> set[str]:
    """The package modules `path` imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = {f"{node.module}.{a.name}" for a in node.names}
            submodules = names & known
            out |= submodules if submodules == names else submodules | {node.module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out & known


def import_graph() -> dict[str, set[str]]:
    known = {module_name(p) for p in sources()}
    return {module_name(p): imported(p, known) - {module_name(p)} for p in sources()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a loop (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_import_each_other():
    assert cycles(import_graph()) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def package(module: str) -> str:
    """What the package-level check counts as one package: each sub-package of tfos_jobs (each job
    under tfos_jobs.jobs), each top-level module, and udfs."""
    parts = module.split(".")
    if parts[0] != "tfos_jobs":
        return parts[0]
    return ".".join(parts[:3] if len(parts) >= 3 and parts[1] == "jobs" else parts[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, imports in graph.items():
        packages.setdefault(package(module), set()).update(package(d) for d in imports)
    return {p: imports - {p} for p, imports in packages.items()}


def test_no_two_packages_import_each_other():
    """Modules may avoid a cycle that their packages still make (data.x -> model.y -> data.z):
    packages form layers too."""
    graph = import_graph()
    assert cycles(package_graph(graph)) == []
    planted = {**graph, "tfos_jobs.data.planted": {"tfos_jobs.model.export"}}
    assert "tfos_jobs.data" in package_graph(graph)["tfos_jobs.model"]
    assert cycles(package_graph(planted)) == [["tfos_jobs.data", "tfos_jobs.model"]]


# What starting trials another way would take: Spark jobs of their own, a control server, or the
# code that runs on the executors.
TRIAL_LAUNCH = ("mapInArrow", "mapPartitions", "mapInPandas", "parallelize", "setJobGroup", "addTag",
                "interruptTag", "cancelJobGroup", "ControlServer")
EXECUTOR_SIDE = ("tfos_jobs.cluster.node", "tfos_jobs.cluster.driver.control_server", "tfos_jobs.cluster.driver.relay",
                 "tfos_jobs.control_channel")


def trial_launch_offences(where: str, source: str, imports: set[str]) -> list[str]:
    """How a sweep module starts trials other than through the launcher seam."""
    tree = ast.parse(source)
    names = sorted({n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(tree)
                    if isinstance(n, (ast.Attribute, ast.Name)) and (n.attr if isinstance(n, ast.Attribute)
                                                                       else n.id) in TRIAL_LAUNCH})
    return [f"{where}: {n}" for n in names] + [f"{where}: imports {m}" for m in sorted(imports)
                                               if m.startswith(EXECUTOR_SIDE)]


def test_sweeps_start_trials_only_through_the_launcher_seam():
    """Rules checked: every trial of a sweep is a training run (`tfos_jobs.jobs.train.run`, the
    train job's only entry a sweep uses) whose nodes a `cluster.driver.launcher.Launcher` starts;
    nothing under tfos_jobs/jobs/sweep/ starts a Spark job, tags or cancels one, runs a control
    server, or imports what runs on the executors or speaks the control channel."""
    graph = import_graph()
    sweep = {m: d for m, d in graph.items() if m.startswith("tfos_jobs.jobs.sweep.")}
    assert len(sweep) >= 5
    from_train = sorted({d for deps in sweep.values() for d in deps if d.startswith("tfos_jobs.jobs.train")})
    assert from_train == ["tfos_jobs.jobs.train"]
    assert "tfos_jobs.cluster.driver.launcher" in graph["tfos_jobs.jobs.sweep.driver.job"]
    paths = {module_name(p): p for p in sources()}
    assert [o for m, deps in sweep.items() for o in trial_launch_offences(m, paths[m].read_text(), deps)] == []
    job = paths["tfos_jobs.jobs.sweep.driver.job"].read_text()
    assert "launcher=launcher" in job and "train.run(" in job
    planted = "def go(spark, rows):\n    spark.sparkContext.setJobGroup('g', 'trial')\n    return rows.mapInArrow(f, 's')\n"
    assert trial_launch_offences("x", planted, {"tfos_jobs.cluster.node.task"}) == [
        "x: mapInArrow", "x: setJobGroup", "x: imports tfos_jobs.cluster.node.task"]


# Lowest first: a module imports from its own layer or a lower one, never from a higher one.
LAYERS = (
    ("tfos_jobs", "tfos_jobs.errors", "tfos_jobs.names", "tfos_jobs.tasks", "tfos_jobs.topology",
     "tfos_jobs.tf_import", "tfos_jobs.python_daemon", "tfos_jobs.control_channel", "tfos_jobs.resources",
     "tfos_jobs.driver_calls", "tfos_jobs.sessions", "tfos_jobs.worker_python"),  # plain names and rules; what a
    # session of either kind can do; whether its executors' Python imports the package
    ("tfos_jobs.features", "tfos_jobs.storage"),  # the feature spec; files on any filesystem
    ("tfos_jobs.config",),
    ("tfos_jobs.contracts", "tfos_jobs.progress_log"),  # what two parts exchange
    ("tfos_jobs.data", "tfos_jobs.model", "tfos_jobs.search", "tfos_jobs.databases",
     "tfos_jobs.session_builder"),  # the libraries the jobs are made of
    ("tfos_jobs.cluster",),  # TF nodes on the executors: launch, supervise, the nodes' side
    ("tfos_jobs.jobs", "tfos_jobs.serving", "udfs", "tfos_jobs.tracking"),  # the jobs, the serving library, the
    # UDF's executor side, MLflow
    ("tfos_jobs.cli", "tfos_jobs.deploy", "tfos_jobs.entrypoints", "tfos_jobs.api"),  # the commands, what gets
    # them onto a cluster, spark-submit's entry points, the Python API (its demos too)
)


def layer(module: str) -> int:
    """The layer of the longest prefix of `module` LAYERS names."""
    matches = [(len(prefix), i) for i, names in enumerate(LAYERS) for prefix in names
               if module == prefix or module.startswith(prefix + ".")]
    if not matches:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} -> {d}" for m in sorted(graph) for d in sorted(graph[m]) if layer(d) > layer(m)]


def test_no_module_imports_from_a_higher_layer():
    assert upward_imports(import_graph()) == []
    assert upward_imports({"tfos_jobs.config.train": {"tfos_jobs.model.exchange", "tfos_jobs.topology"}}) == [
        "tfos_jobs.config.train -> tfos_jobs.model.exchange"]


# What the command line imports: the Python API and what a client of it holds (the config, the
# errors, the files the package ships, the way onto a cluster), and its own modules.
CLI_IMPORTS = ("tfos_jobs.api", "tfos_jobs.config", "tfos_jobs.deploy", "tfos_jobs.errors", "tfos_jobs.resources",
               "tfos_jobs.cli")
def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def package_imports(source: str) -> list[tuple[str, str]]:
    """(the function that makes it, "" at the top; the module) for each import in `source` of a
    module of the package, of udfs or of the bench."""
    tree = ast.parse(source)
    where = {id(node): f.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(f)}  # the innermost function, walked last, names the node
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if is_module(f"{node.module}.{a.name}") else node.module
                     for a in node.names]
        else:
            continue
        found += [(where.get(id(node), ""), n) for n in names if n.split(".")[0] in (*PACKAGES, "benchmarks")]
    return found


def cli_offences(module: str, source: str) -> list[str]:
    """The imports of a module of the command line past CLI_IMPORTS."""
    return [f"{module}{'.' + function if function else ''} imports {name}" for function, name in package_imports(source)
            if not any(name == p or name.startswith(p + ".") for p in CLI_IMPORTS)]


def test_the_command_line_is_a_client_of_the_api():
    """Rule checked: tfos_jobs/cli/ reaches the package through the API (and what a client of it
    holds), never the jobs, the data or the bench themselves."""
    paths = {module_name(p): p for p in sources() if module_name(p).split(".")[:2] == ["tfos_jobs", "cli"]}
    assert {"tfos_jobs.cli", "tfos_jobs.cli.commands", "tfos_jobs.cli.parser"} <= set(paths)
    assert [o for m, p in paths.items() for o in cli_offences(m, p.read_text())] == []
    planted = ("from tfos_jobs import api, config\nfrom tfos_jobs.data import fleet\n\n\n"
               "def cmd_train(config, args):\n    from tfos_jobs.model.builder import check_model\n\n\n"
               "def cmd_predict(config, args):\n    import benchmarks.cli\n"
               "    from tfos_jobs.model.builder import check_model\n")
    assert cli_offences("tfos_jobs.cli.commands", planted) == [
        "tfos_jobs.cli.commands imports tfos_jobs.data.fleet",
        "tfos_jobs.cli.commands.cmd_train imports tfos_jobs.model.builder",
        "tfos_jobs.cli.commands.cmd_predict imports benchmarks.cli",
        "tfos_jobs.cli.commands.cmd_predict imports tfos_jobs.model.builder"]


TFOS_ADAPTER = "tfos_jobs.cluster.node.tfos_cluster"


def imports_of(source: str, top: str) -> list[str]:
    """Every module `source` imports whose top-level package is `top`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == top]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == top:
            found.append(node.module)
    return found


def test_only_the_adapter_imports_tensorflowonspark():
    """TensorFlowOnSpark forms the TF cluster behind one module; the node, the driver and everything else reach it only
    through that module."""
    users = sorted(module_name(p) for p in sources() if imports_of(p.read_text(), "tensorflowonspark"))
    assert users == [TFOS_ADAPTER]
    planted = "import os\n\n\ndef f():\n    from tensorflowonspark import TFSparkNode\n    import tensorflowonspark.util\n"
    assert imports_of(planted, "tensorflowonspark") == ["tensorflowonspark", "tensorflowonspark.util"]


# -- size and prose ----------------------------------------------------------------------------

MAX_LINES = 400
PROSE_LINES = 40  # in text blocks that are no docstring: more, and the text belongs in docs/


def prose_lines(source: str) -> int:
    """Lines of the module's multi-line string literals (three lines or more) besides docstrings:
    text kept in code, where a message or a query is one line or a few."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    blocks = [n.value.count("\n") + 1 for n in ast.walk(tree)
              if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]
    return sum(lines for lines in blocks if lines >= 3)


def test_modules_are_small_and_hold_code_not_prose():
    too_long = [f"{rel(p)}: {n} lines" for p in sources() if (n := len(p.read_text().splitlines())) > MAX_LINES]
    prose = [f"{rel(p)}: {n} lines of text" for p in sources() if (n := prose_lines(p.read_text())) > PROSE_LINES]
    assert too_long == [] and prose == []
    assert prose_lines('"""A docstring\nof three\nlines."""\nNOTES = """\none\ntwo\n"""\nerror = "a\\nb"\n') == 4


MAX_FUNCTION_LINES = 80  # from `def` to the function's last line, docstring included


def long_functions(module: str, source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function in `source` (methods and nested functions
    too) longer than `limit` lines."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and lines > limit:
                    found.append((name, lines))
                visit(child, name)
            else:
                visit(child, prefix)

    visit(ast.parse(source), module)
    return found


def test_no_function_is_over_80_lines():
    found = {name: f"{rel(p)}: {name} ({lines} lines)" for p in sources()
             for name, lines in long_functions(module_name(p), p.read_text())}
    assert list(found.values()) == []

    def body(indent: int, lines: int) -> str:
        return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(lines))

    planted = "def short():\n    return 1\n\n\nclass C:\n    def long(self):\n" + body(8, 79) + "        def inner():\n" + body(12, 80)
    assert long_functions("m", planted) == [("m.C.long", 161), ("m.C.long.inner", 81)]
    assert long_functions("m", "def f():\n" + body(4, 79)) == []  # 80 lines: within the limit


def unresolved_imports(path: Path) -> list[str]:
    """The package names `path` imports (at the top or inside a function) that do not exist:
    what a module left behind when a name moved."""
    import importlib
    import importlib.util

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                and node.module.split(".")[0] in (*PACKAGES, "tests")):
            continue
        module = importlib.import_module(node.module)
        package = hasattr(module, "__path__")  # a package's submodules are names too
        for alias in node.names:
            if not hasattr(module, alias.name) and not (
                    package and importlib.util.find_spec(f"{node.module}.{alias.name}") is not None):
                found.append(f"{rel(path)}:{node.lineno}: {node.module} has no {alias.name}")
    return found


def test_every_import_of_a_package_name_finds_it():
    tests = sorted((ROOT / "tests").rglob("*.py"))
    assert [f for p in (*sources(), *tests) for f in unresolved_imports(p)] == []
    planted = ROOT / "tests" / "unit" / "planted_import.py"
    try:
        planted.write_text("def f():\n    from tfos_jobs.model.exchange import ALL_GATHER\n")
        assert unresolved_imports(planted) == ["tests/unit/planted_import.py:2: tfos_jobs.model.exchange has no ALL_GATHER"]
    finally:
        planted.unlink()


# -- the layout --------------------------------------------------------------------------------

# Every package, by the one kind of thing it holds (its __init__.py says more).
FOLDERS = {
    "tfos_jobs": "the package: the API, the command line, and the plain names every part shares",
    "tfos_jobs.config": "configuration: TOML to frozen dataclasses",
    "tfos_jobs.contracts": "contracts between two parts, one owner module each",
    "tfos_jobs.features": "the feature spec",
    "tfos_jobs.storage": "files on any filesystem, from the driver",
    "tfos_jobs.data": "reading, joining, splitting and writing data (a library of the jobs)",
    "tfos_jobs.model": "the Keras models and their export",
    "tfos_jobs.search": "hyperparameter search",
    "tfos_jobs.databases": "local database servers for the demo and the tests",
    "tfos_jobs.cluster": "TF nodes on the executors",
    "tfos_jobs.cluster.driver": "the nodes' launch and supervision, on the driver",
    "tfos_jobs.cluster.node": "a TF node, on an executor",
    "tfos_jobs.jobs": "the jobs",
    "tfos_jobs.jobs.prepare": "the prepare job",
    "tfos_jobs.jobs.train": "the train job",
    "tfos_jobs.jobs.train.driver": "the train job, on the driver",
    "tfos_jobs.jobs.serve": "the serving jobs",
    "tfos_jobs.jobs.sweep": "the sweep job",
    "tfos_jobs.jobs.sweep.driver": "the sweep job, on the driver",
    "tfos_jobs.jobs.stream": "the stream job",
    "tfos_jobs.jobs.stream.driver": "the stream job, on the driver",
    "tfos_jobs.jobs.stream.executor": "the stream job, on the executors",
    "tfos_jobs.serving": "the serving library the serving jobs and the stream share",
    "tfos_jobs.tracking": "MLflow",
    "tfos_jobs.api": "the Python API, one module per kind of step",
    "tfos_jobs.api.demos": "the demos: the jobs on the embedded data through the API",
    "tfos_jobs.cli": "the command line, a client of the API",
    "tfos_jobs.deploy": "getting the jobs onto a cluster",
    "tfos_jobs.entrypoints": "spark-submit's entry points",
    "tfos_jobs.resources": "files the package ships",
    "udfs": "the SQL prediction function",
}
# The package's root: the plain names and rules every part shares, and the Spark session.
ROOT_MODULES = {
    "errors", "names", "tasks", "topology", "control_channel", "progress_log",  # names, rules, messages
    "session_builder", "sessions", "driver_calls", "user_code", "worker_python",  # the Spark session and what it is asked
    "tf_import", "python_daemon",  # TensorFlow and pyspark, imported the one way every process does
}
# Modules outside storage/ that reach Hadoop's FileSystem themselves, and why.
OWN_FILESYSTEM = {
    "tfos_jobs/config/loading.py": "a config file on HDFS read before any session exists (HadoopFS.before_session)",
}
FILESYSTEM_NAMES = ("HadoopFS", "DriverFS", "FileSystem", "filesystem")


def packages() -> set[str]:
    return {module_name(p) for p in sources() if p.name == "__init__.py"}


def test_each_folder_holds_one_kind_of_thing_and_says_so():
    assert packages() == set(FOLDERS), "a new folder: name its kind in FOLDERS (and docs/development.md)"
    undocumented = [name for name in FOLDERS if not ast.get_docstring(ast.parse(
        (ROOT / name.replace(".", "/") / "__init__.py").read_text()))]
    assert undocumented == []


def test_the_root_holds_only_the_front_door_and_shared_names():
    root = {p.stem for p in (ROOT / "tfos_jobs").glob("*.py") if p.stem != "__init__"}
    assert root == ROOT_MODULES, "a module at the root: put it in the folder of its kind, or name it in ROOT_MODULES"


def entry_point_offences(where: str, source: str) -> list[str]:
    """A spark-submit entry point (a script that hands its arguments to the command line) outside
    entrypoints/ (the command line's own `python -m tfos_jobs.cli` aside)."""
    tree = ast.parse(source)
    hands_on = any(isinstance(n, ast.ImportFrom) and n.module == "tfos_jobs.cli" for n in tree.body)
    return [where] if hands_on and not where.startswith(("tfos_jobs/entrypoints/", "tfos_jobs/cli/")) else []


def test_spark_submits_entry_points_are_together():
    entry = sorted(rel(p) for p in sources() if "tfos_jobs/entrypoints/" in rel(p) and p.name != "__init__.py")
    assert entry == [f"tfos_jobs/entrypoints/{n}.py" for n in ("job", "predict", "prepare", "sweep", "train")]
    assert [o for p in sources() for o in entry_point_offences(rel(p), p.read_text())] == []
    assert entry_point_offences("tfos_jobs/train.py", "from tfos_jobs.cli import main\n") == ["tfos_jobs/train.py"]


def filesystem_offences(where: str, source: str) -> list[str]:
    """Names of Hadoop's FileSystem layer a module outside storage/ imports."""
    if where.startswith("tfos_jobs/storage/") or where in OWN_FILESYSTEM:
        return []
    return [f"{where}: {a.name}" for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)
            and (n.module or "").startswith("tfos_jobs.storage") for a in n.names if a.name in FILESYSTEM_NAMES]


def test_one_file_api_outside_storage():
    assert [o for p in sources() for o in filesystem_offences(rel(p), p.read_text())] == []
    assert filesystem_offences("tfos_jobs/x.py", "from tfos_jobs.storage import Storage, filesystem\n") == [
        "tfos_jobs/x.py: filesystem"]



# Where a config is changed through the command line's `key=value` strings: the command line, the
# command lines deploy/ builds for remote `tfos` runs, and config/, which owns the mechanism.
SET_STRINGS = ("tfos_jobs/cli", "tfos_jobs/deploy/", "tfos_jobs/config/")


def set_string_offences(where: str, source: str) -> list[str]:
    """Calls that change a config by `--set` strings (`apply_override`, `load(path, overrides)` of a
    config module) outside SET_STRINGS: everywhere else settings are typed (`Config.with_settings`)."""
    if where.startswith(SET_STRINGS):
        return []
    tree = ast.parse(source)
    config_names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
                    if (n.module or "").startswith("tfos_jobs.config") or (n.module == "tfos_jobs" and a.name == "config")}
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        overrides = len(n.args) > 1 or any(k.arg == "overrides" for k in n.keywords)
        if name == "apply_override" or (name == "load" and overrides and (owner in config_names or (
                owner is None and name in config_names))):
            found.append(f"{where}:{n.lineno}: {ast.unparse(n.func)}")
    return found


def test_settings_are_typed_outside_the_command_line():
    assert [o for p in sources() for o in set_string_offences(rel(p), p.read_text())] == []
    planted = ("from tfos_jobs import config as config_mod\nfrom tfos_jobs.config import sweep\n"
               "def trial(path, x):\n    a = config_mod.load(path, [f'train.epochs={x}'])\n"
               "    b = sweep.load(path, overrides=['sweep.max_trials=2'])\n    config_mod.apply_override({}, 'a=1')\n"
               "    load(spark, a, b)\n    return config_mod.load(path).with_settings({'train.epochs': x})\n")
    assert set_string_offences("tfos_jobs/search/x.py", planted) == [
        "tfos_jobs/search/x.py:4: config_mod.load", "tfos_jobs/search/x.py:5: sweep.load",
        "tfos_jobs/search/x.py:6: config_mod.apply_override"]
    assert set_string_offences("tfos_jobs/deploy/x.py", planted) == []
