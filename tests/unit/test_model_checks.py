"""A user's model, checked before Spark starts, and what is shipped for it.

`tfos train` and `tfos sweep` run as users run them, with a `java` that leaves a mark if Spark
ever starts its JVM: a wrong model must end in one error line, exit 2, with no mark."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tfos_jobs import api, config, user_code
from tfos_jobs.errors import ConfigError
from tfos_jobs.model.builder import check_build, input_names

from tests.conftest import CENSUS, ROOT

BIN = Path(sys.executable).parent
EXAMPLES = ROOT / "examples"
SWEEP = ROOT / "conf" / "sweep.toml"


@pytest.fixture
def no_java(tmp_path):
    """A JAVA_HOME whose `java` writes a mark and fails: Spark's launcher runs it to start the JVM."""
    home, mark = tmp_path / "java-home", tmp_path / "java-started"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    java.chmod(0o755)
    return home, mark


def tfos(command: list[str], java_home: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": f"{ROOT}{os.pathsep}{EXAMPLES}",
           "JAVA_HOME": str(java_home)}
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "tfos"), *command], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    return proc, time.monotonic() - started


CASES = {
    "mymodels:buidl": r"'mymodels:buidl': module 'mymodels' has no callable 'buidl' \(did you mean mymodels:build\?\)",
    "tests.cluster.boom:tensor": r"tests.cluster.boom:tensor returned a KerasTensor, not a tf.keras.Model",
    "tests.cluster.boom:keras3": r"tests.cluster.boom:keras3 returned a Keras 3 model \(keras\.\S+\), not a "
                                 r"tf\.keras\.Model: .*keras-team/keras#20585.*: `import tf_keras as keras` in place of "
                                 r"`import keras`$",
    "tests.cluster.boom:build": r"tests.cluster.boom:build raised ValueError: boom: this model function always fails$",
    "tests.cluster.boom:extra_input": r"built a model with input\(s\) shoe_size that the feature spec does not provide",
    "tests.cluster.boom:two_args": r"tests.cluster.boom:two_args must take four positional arguments \(spec, vocab, "
                                   r"stats, model_cfg\); its signature is \(spec, vocab\)",
}


def assert_one_error_line_before_spark(proc, mark: Path, command: str, pattern: str) -> None:
    import re

    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"tfos {command}: error: train.model.kind: "), proc.stderr[-3000:]
    assert re.search(pattern, lines[0]), lines[0]
    assert not mark.exists(), "Spark started its JVM"
    assert "SparkContext" not in proc.stdout + proc.stderr and "spark-" not in proc.stdout + proc.stderr


# As users run it, for four kinds of mistake; the other checks run in-process below.
@pytest.mark.parametrize("kind", ["mymodels:buidl", "tests.cluster.boom:tensor", "tests.cluster.boom:build",
                                  "tests.cluster.boom:keras3"])
def test_train_refuses_a_wrong_model_before_spark_starts(kind, no_java):
    home, mark = no_java
    proc, _ = tfos(["train", "--config", str(CENSUS), "--set", f"train.model.kind={kind}"], home)
    assert_one_error_line_before_spark(proc, mark, "train", CASES[kind])


def test_sweep_refuses_a_wrong_model_before_spark_starts(no_java, tmp_path):
    home, mark = no_java
    kind = "tests.cluster.boom:tensor"
    proc, _ = tfos(["sweep", "--config", str(CENSUS), "--space", str(SWEEP), "--set", f"sweep.dir={tmp_path}/s",
                          "--set", f"train.model.kind={kind}"], home)
    assert_one_error_line_before_spark(proc, mark, "sweep", CASES[kind])


@pytest.mark.parametrize("kind", ["tests.cluster.boom:extra_input", "tests.cluster.boom:two_args",
                                  "tests.cluster.boom:keras3"])
def test_the_other_wrong_models(kind):
    cfg = config.load(CENSUS, [f"train.model.kind={kind}"])
    with pytest.raises(ConfigError, match=r"^train.model.kind: .*" + CASES[kind]):
        check_build(model_cfg=cfg.train.model, spec=cfg.features)


def test_a_swept_model_kind_is_checked_too(tmp_path):
    """One of the searched kinds is wrong: the sweep names it before any trial."""
    from tfos_jobs.config import sweep as sweep_file

    overrides = [f"sweep.dir={tmp_path}/s", "params.train.model.kind.type=categorical",
                 'params.train.model.kind.values=["wide_deep", "tests.cluster.boom:build"]']
    sweep = sweep_file.load(SWEEP, overrides)
    with pytest.raises(ConfigError, match=r"raised ValueError: boom.*\(the trials with "
                                          r"train.model.kind='tests.cluster.boom:build'\)"):
        api.check_sweep(config=config.load(CENSUS), space=sweep)


def test_the_check_would_see_spark_start(no_java, tmp_path):
    """The mark above is real: a good model goes on to start Spark, which runs the fake java."""
    home, mark = no_java
    proc, _ = tfos(["train", "--config", str(CENSUS), "--set", "train.model.kind=mymodels:build",
                    "--set", f"train.dataset={tmp_path}/none", "--set", f"train.model_dir={tmp_path}/model"], home)
    assert proc.returncode != 0 and mark.exists()


def test_dry_build_of_the_example_model_with_its_params(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    cfg = config.load(CENSUS, ["train.model.kind=mymodels:build", "train.model.params.cross_layers=3"])
    import mymodels

    assert check_build(model_cfg=cfg.train.model, spec=cfg.features).fn is mymodels.build
    from tfos_jobs.model.builder import placeholder_spec, placeholder_stats, placeholder_vocab

    spec = placeholder_spec(cfg.features)
    model = mymodels.build(spec, placeholder_vocab(spec), placeholder_stats(spec), cfg.train.model)
    assert [l.name for l in model.layers if l.name.startswith("cross_") and l.name[6:].isdigit()] == \
           ["cross_0", "cross_1", "cross_2"]
    assert sorted(input_names(model)) == sorted(cfg.features.model_inputs)
    # a callable given as such (the Python API) goes through the same checks
    assert api.check_model(config=cfg, build=mymodels.build).fn is mymodels.build
    with pytest.raises(ConfigError, match=r"train.model.kind: .*two_args must take four positional arguments"):
        from tests.cluster import boom

        api.check_model(config=cfg, build=boom.two_args)


def test_what_is_shipped_for_a_model_kind(tmp_path, monkeypatch):
    (tmp_path / "single.py").write_text("def build(spec, vocab, stats, model_cfg):\n    pass\n")
    pkg = tmp_path / "teammodels"
    (pkg / "nets").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "nets" / "__init__.py").write_text("")
    (pkg / "nets" / "dcn.py").write_text("def build(spec, vocab, stats, model_cfg):\n    pass\n")
    (pkg / "nets" / "__pycache__").mkdir()
    (pkg / "nets" / "__pycache__" / "dcn.cpython-311.pyc").write_bytes(b"x")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert user_code.to_ship("single:build") == str(tmp_path / "single.py")
    shipped = user_code.to_ship("teammodels.nets.dcn:build")
    assert shipped.endswith(".zip") and Path(shipped).name.startswith("teammodels-")
    assert sorted(zipfile.ZipFile(shipped).namelist()) == [
        "teammodels/__init__.py", "teammodels/nets/__init__.py", "teammodels/nets/dcn.py"]
    assert user_code.to_ship("teammodels.nets.dcn:build") == shipped  # the same code, the same file
    (pkg / "nets" / "dcn.py").write_text("def build(spec, vocab, stats, model_cfg):\n    return 1\n")
    assert user_code.to_ship("teammodels.nets.dcn:build") != shipped  # changed code, a new name
    # nothing to ship: built-in kinds, this package, installed modules, the standard library
    for kind in ("wide_deep", "sequence_autoencoder", "tfos_jobs.model.builder:build_model", "numpy:array",
                 "json:loads", "no_such_module:build"):
        assert user_code.to_ship(kind) is None, kind


def test_a_model_module_in_the_current_directory_is_found_and_shipped(tmp_path, monkeypatch):
    (tmp_path / "herenets.py").write_text("def build(spec, vocab, stats, model_cfg):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert user_code.to_ship("herenets:build") == str(tmp_path / "herenets.py")


def test_submit_adds_the_model_module_to_py_files(tmp_path):
    (tmp_path / "submitnets.py").write_text("def build(spec, vocab, stats, model_cfg):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for mode in ("client", "cluster"):
        proc = subprocess.run([str(BIN / "tfos"), "submit", "--dry-run", "--master", "yarn", "--deploy-mode", mode,
                               "--py-files", "extra.py", "train", "--config", "census",
                               "--set", "train.model.kind=submitnets:build"],
                              capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        args = proc.stdout.split()
        assert args[args.index("--py-files") + 1] == f"extra.py,{tmp_path / 'submitnets.py'}"
        assert args.count("--py-files") == 1
    # a training function's module too
    (tmp_path / "submittraining.py").write_text("def fit(ctx):\n    pass\n")
    proc = subprocess.run([str(BIN / "tfos"), "submit", "--dry-run", "--master", "yarn", "--deploy-mode", "cluster",
                           "train", "--config", "census", "--set", "train.fn=submittraining:fit"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"--py-files {tmp_path / 'submittraining.py'}" in proc.stdout
    # a sweep ships every kind its trials may build, read from its sweep file too
    space = tmp_path / "space.toml"
    space.write_text(f'[sweep]\ndir = "{tmp_path}/s"\n[params."train.model.kind"]\ntype = "categorical"\n'
                     'values = ["wide_deep", "submitnets:build"]\n')
    proc = subprocess.run([str(BIN / "tfos"), "submit", "--dry-run", "--master", "yarn", "sweep", "--config", "census",
                           "--space", str(space)], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"--py-files {tmp_path / 'submitnets.py'}" in proc.stdout


def test_a_sweep_searches_a_user_models_params(tmp_path):
    from tfos_jobs.config import sweep as sweep_file
    from tfos_jobs.search import space

    overrides = [f"sweep.dir={tmp_path}/s", 'sweep.fixed.train.model.kind="mymodels:build"',
                 "params.train.model.params.cross_layers.type=int", "params.train.model.params.cross_layers.low=1",
                 "params.train.model.params.cross_layers.high=4"]
    sweep = sweep_file.load(SWEEP, overrides)
    param = next(p for p in sweep.params if p.key == "train.model.params.cross_layers")
    assert param.column == "model_params_cross_layers"
    cfg = space.trial_config(config.load(CENSUS), sweep, {"train.model.params.cross_layers": 3,
                                                          "train.learning_rate": 0.01, "train.batch_size": 256})
    assert cfg.train.model.kind == "mymodels:build" and cfg.train.model.params == {"cross_layers": 3}
    assert space.model_kinds(sweep, "wide_deep") == ["mymodels:build"]
