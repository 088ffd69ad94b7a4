"""`tfos serve-sql` as its users meet it: a real server process answering beeline (pyspark's own,
over JDBC) and PyHive (Python DB-API) with the numbers `tfos sql` gives, its password check, and
a model swapped while queries run."""
from __future__ import annotations

import csv
import io
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyspark
import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs.contracts import sql_endpoint as contract
from tfos_jobs.jobs.serve import sql

from tests.commands import kill_group
from tests.conftest import CENSUS
from tests.serving.clients import dbapi

ROOT = Path(__file__).resolve().parents[2]
BEELINE = Path(pyspark.__file__).parent / "bin" / "beeline"
PASSWORD = "correct-horse-battery-staple"  # beeline splits arguments on spaces
FUNCTION = "predict_income"
PINNED = "predict_income_pinned"  # a second function, on the first model throughout
BAGS = "predict_bags"  # a third, on a model of a text, a list and a vector (conftest.bag_model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(inputs: tuple[str, ...]) -> str:
    return (f"SELECT education, avg({FUNCTION}({', '.join(inputs)}).probability) AS p "
            f"FROM {sql.FEATURES_VIEW} GROUP BY education")


class Server:
    """`tfos serve-sql` in its own process group (`kill` ends its JVM and Python workers too); its
    output lines are kept and can be waited for."""

    def __init__(self, config_file: Path, overrides: list[str], port: int, env: dict[str, str]):
        cmd = [sys.executable, "-m", "tfos_jobs.cli", "serve-sql", "--config", str(config_file), "--port", str(port),
               "--set", "serve_sql.status_seconds=1", *[a for o in overrides for a in ("--set", o)]]
        self.port, self.lines, self.seen = port, queue.Queue(), []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                     env={**os.environ, "PYSPARK_PYTHON": sys.executable, **env},
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float = 240.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"tfos serve-sql exited ({self.proc.wait()}):\n" + "\n".join(self.seen[-40:]))
            self.seen.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no {prefix!r} line in {timeout:.0f} s:\n" + "\n".join(self.seen[-40:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.wait()

    def kill(self) -> None:
        kill_group(self.proc)


def beeline(url: str, statement: str, password: str) -> list[list[str]]:
    """Rows (header first) beeline prints as CSV; its errors fail the test with its output."""
    proc = subprocess.run([str(BEELINE), "-u", url, "-n", "analyst", "-p", password, "--silent=true",
                           "--outputformat=csv2", "-e", statement], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"beeline exited {proc.returncode}: {proc.stdout[-2000:]} {proc.stderr[-3000:]}")
    text = re.sub(r"(?m)^\d+: jdbc:\S+> ?", "", proc.stdout)  # its prompt, printed before the result
    return [row for row in csv.reader(io.StringIO(text)) if row]


@pytest.fixture(scope="module")
def server(setup, bag_model, tmp_path_factory):
    """On every interface with a password (clients connect over 127.0.0.1)."""
    cfg, model, _ = setup
    root = tmp_path_factory.mktemp("serve-sql")
    config_file = root / "serve.toml"
    write_config(config_file, model, model, bind="0.0.0.0", more={BAGS: bag_model})
    overrides = ["spark.master=local[2]", "spark.app_name=tfos-serve-sql-test",
                 *(f"sources.{n}.path={s.path}" for n, s in cfg.sources.items())]
    srv = Server(config_file, overrides, free_port(), {"TFOS_SQL_PASSWORD": PASSWORD})
    try:
        srv.wait_for(contract.READY)
        yield srv, config_file
    finally:
        code = srv.stop()
        assert code == 0, "\n".join(srv.seen[-40:])


def write_config(path: Path, model: Path, pinned: Path | None = None, bind: str = "127.0.0.1",
                 more: dict[str, Path] | None = None) -> None:
    """A password-checked server where FUNCTION serves `model` (and PINNED keeps serving `pinned`
    beside it, and `more` functions their models)."""
    functions = {FUNCTION: model, **({PINNED: pinned} if pinned else {}), **(more or {})}
    path.write_text(f'extends = "{CENSUS}"\n\n[serve_sql]\nbind = "{bind}"\nauth = "password"\n\n[serve_sql.functions]\n'
                    + "".join(f'{name} = "{served}"\n' for name, served in functions.items()))


def in_process(spark, setup, model: Path):
    """What `tfos sql` answers to the query with `model` serving FUNCTION, and the model's inputs."""
    from udfs.model_location import served_spec

    cfg, _, _ = setup
    inputs = served_spec(spark, str(model), setting="predict.model").model_inputs
    return sql.run(spark, cfg, query(inputs), model=str(model), name=FUNCTION, log=lambda _: None), inputs


def close(got: list[tuple], want: list) -> bool:
    """Same groups, averages equal to 1e-9 (the order of a sum may differ between runs)."""
    return len(got) == len(want) and all(
        g[0] == w[0] and abs(g[1] - w[1]) <= 1e-9 * max(1.0, abs(w[1])) for g, w in zip(got, want))


def test_beeline_and_dbapi_give_tfos_sqls_numbers(spark, setup, server):
    srv, _ = server
    want, inputs = in_process(spark, setup, setup[1])
    url = contract.jdbc_url("127.0.0.1", srv.port, "binary", "cliservice", False)
    header, *rows = beeline(url, query(inputs), PASSWORD)
    assert header == ["education", "p"]
    from_beeline = spark.createDataFrame([(e, float(p)) for e, p in rows], want.schema)
    from_dbapi = spark.createDataFrame(dbapi(srv.port, query(inputs), PASSWORD), want.schema)
    assert want.count() >= 10
    assertDataFrameEqual(from_beeline, want, rtol=1e-9)
    assertDataFrameEqual(from_dbapi, want, rtol=1e-9)
    # the counters: beeline's query and PyHive's each scored every row of the view once
    scored = 2 * setup[2].count()
    deadline = time.monotonic() + 30
    while True:
        status = dict(dbapi(srv.port, f"SELECT {contract.FUNCTION}, {contract.ROWS} FROM {contract.STATUS_VIEW}",
                            PASSWORD))
        if status.get(FUNCTION) == scored or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == {FUNCTION: scored, PINNED: 0, BAGS: 0}


def test_a_wrong_call_gets_one_message_and_runs_no_task(server):
    """Over JDBC, a struct lacking features is refused when the query is analysed: the client's
    error is the one message naming them, and the function scored no row."""
    srv, _ = server
    from pyhive.exc import OperationalError

    before = dict(dbapi(srv.port, f"SELECT {contract.FUNCTION}, {contract.ROWS} FROM {contract.STATUS_VIEW}", PASSWORD))
    with pytest.raises(OperationalError) as refused:
        dbapi(srv.port, f"SELECT {FUNCTION}(struct(age, workclass)) FROM {sql.FEATURES_VIEW}", PASSWORD)
    message = refused.value.args[0].status.errorMessage
    assert "the struct lacks feature(s) fnlwgt, education" in message
    assert f"{FUNCTION} takes the features as 23 arguments in this order: age, workclass" in message
    assert "Traceback" not in message and "PythonException" not in message and len(message.splitlines()) == 1
    after = dict(dbapi(srv.port, f"SELECT {contract.FUNCTION}, {contract.ROWS} FROM {contract.STATUS_VIEW}", PASSWORD))
    assert after == before


def sql_literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, list):
        return f"array({', '.join(map(sql_literal, value))})"
    if isinstance(value, float):
        return f"{value!r}D"
    return f"'{value}'" if isinstance(value, str) else str(value)


def test_texts_lists_and_vectors_over_jdbc_score_as_the_savedmodel(server, bag_model):
    """A JDBC/ODBC client passes a text, an array of strings and an array of numbers, over a table (`struct(*)`) and as
    literals (`array('gift', 'sale')`, decimals as SQL writes them), and gets the SavedModel's numbers; a list given
    as a string is refused when the query is analysed, naming the feature and the types it takes."""
    import numpy as np
    import tensorflow as tf
    from pyhive.exc import OperationalError

    from tests.serving.test_bag_udf import ROWS, as_stored

    srv, _ = server
    values = ", ".join(f"({', '.join(map(sql_literal, row))})" for row in ROWS)
    table = f"(SELECT * FROM VALUES {values} AS t(id, review, tags, item_vec, shop, price))"
    got = dict(dbapi(srv.port, f"SELECT id, {BAGS}(struct(*)).probability FROM {table}", PASSWORD))
    [(literal,)] = dbapi(srv.port, f"SELECT {BAGS}('Great box, arrived fast', array('gift', 'sale'), array(0.5, -1.0), "
                                   "'a', 3.0).probability", PASSWORD)
    serve = tf.saved_model.load(str(bag_model / "saved_model")).signatures["serving_default"]
    expected = serve(**{k: tf.constant(v) for k, v in as_stored(ROWS).items()})["probability"].numpy()
    np.testing.assert_allclose([got[r[0]] for r in ROWS], expected, atol=1e-6)
    assert literal == pytest.approx(float(expected[0]), abs=1e-6)  # ROWS[0] written as literals
    with pytest.raises(OperationalError) as refused:
        dbapi(srv.port, f"SELECT {BAGS}('great', 'gift,sale', array(0.5, -1.0), 'a', 3.0)", PASSWORD)
    message = refused.value.args[0].status.errorMessage
    assert "argument 2 ('tags') (list feature) has type string, expected one of: array<string>" in message, message


def test_wrong_password_is_rejected_right_one_admitted(server):
    srv, _ = server
    from pyhive.exc import OperationalError
    from thrift.transport.TTransport import TTransportException

    with pytest.raises((TTransportException, OperationalError), match="Error validating the login"):
        dbapi(srv.port, "SELECT 1", "wrong-password")
    url = contract.jdbc_url("127.0.0.1", srv.port, "binary", "cliservice", False)
    with pytest.raises(RuntimeError, match="Error validating the login"):
        beeline(url, "SELECT 1", "wrong-password")
    assert dbapi(srv.port, "SELECT 41 + 1", PASSWORD) == [(42,)]


def test_a_refused_login_is_one_warning_line_on_the_server(server):
    """No Java stack and no password: one WARN line per refused login, naming the user."""
    srv, _ = server
    from pyhive.exc import OperationalError
    from thrift.transport.TTransport import TTransportException

    for user in ("mallory", "eve"):  # eve's line closes what the server printed for mallory's login
        with pytest.raises((TTransportException, OperationalError), match="Error validating the login"):
            hive_login(srv.port, user, "guessed-password")
    printed = lines_until(srv, "login refused for user 'mallory'") + lines_until(srv, "login refused for user 'eve'")
    from_mallory = printed[next(i for i, line in enumerate(printed) if "'mallory'" in line):]
    assert [re.sub(r"^\S+ \S+ ", "", line) for line in from_mallory] == [
        "WARN PasswordAuthenticator: login refused for user 'mallory'",
        "WARN PasswordAuthenticator: login refused for user 'eve'"], from_mallory
    assert not [line for line in srv.seen if "guessed-password" in line]


def lines_until(srv: Server, text: str, timeout: float = 60.0) -> list[str]:
    """The server's lines read from now up to the first one holding `text`, that one included."""
    start = len(srv.seen)
    line = srv.wait_for("", timeout)
    while text not in line:
        line = srv.wait_for("", timeout)
    return srv.seen[start:]


def hive_login(port: int, user: str, password: str) -> None:
    from pyhive import hive

    hive.connect(host="127.0.0.1", port=port, username=user, password=password, auth="CUSTOM").close()


@pytest.mark.slow  # trains a second model
def test_a_swapped_model_serves_the_next_query_and_no_query_fails(spark, setup, server, second_model, bag_model):
    srv, config_file = server
    first, inputs = in_process(spark, setup, setup[1])
    first_rows = sorted(first.collect())
    second, _ = in_process(spark, setup, second_model)
    second_rows = sorted(second.collect())
    assert first_rows != second_rows  # the swap is visible in the numbers
    statement = query(inputs)
    results, errors, done = [], [], threading.Event()

    def keep_querying() -> None:
        while not done.is_set():
            try:
                results.append(sorted(dbapi(srv.port, statement, PASSWORD)))
            except Exception as e:  # any failure during the swap fails the test
                errors.append(repr(e))

    worker = threading.Thread(target=keep_querying)
    worker.start()
    try:
        while not results and not errors:
            time.sleep(0.5)
        write_config(config_file, second_model, setup[1], bind="0.0.0.0", more={BAGS: bag_model})
        srv.proc.send_signal(signal.SIGHUP)
        line = srv.wait_for(contract.RELOADED)
        assert line.startswith(f"{contract.RELOADED} {FUNCTION}:") and str(second_model) in line  # only it changed
        after = sorted(dbapi(srv.port, statement, PASSWORD))
    finally:
        done.set()
        worker.join(timeout=300)
    assert not errors, errors
    assert len(results) >= 2
    assertDataFrameEqual(spark.createDataFrame(after, second.schema), second, rtol=1e-9)
    pinned = sorted(dbapi(srv.port, statement.replace(f"avg({FUNCTION}(", f"avg({PINNED}("), PASSWORD))
    assert close(pinned, first_rows)  # the other function kept its model
    # every answer came whole from one model or the other
    assert all(close(r, first_rows) or close(r, second_rows) for r in results), results
    assert close(results[0], first_rows)


@pytest.mark.slow
def test_http_transport_with_a_password(spark, setup, tmp_path):
    """HiveServer2 over HTTP (what load balancers and ODBC drivers in HTTP mode use), loopback, with
    a password from a private file: beeline and PyHive over HTTP give tfos sql's numbers."""
    import base64

    from pyhive import hive
    from thrift.transport import THttpClient
    from thrift.transport.TTransport import TTransportException

    cfg, model, _ = setup
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    config_file = tmp_path / "serve.toml"
    config_file.write_text(f'extends = "{CENSUS}"\n\n[serve_sql]\ntransport = "http"\nauth = "password"\n'
                           f'password_file = "{secret}"\nuser = "analyst"\n')
    overrides = ["spark.master=local[2]", f"predict.model={model}", f"predict.name={FUNCTION}",
                 *(f"sources.{n}.path={s.path}" for n, s in cfg.sources.items())]
    srv = Server(config_file, overrides, free_port(), {})
    try:
        url = srv.wait_for(contract.READY).split()[-1].replace("localhost", "127.0.0.1")
        assert url == contract.jdbc_url("127.0.0.1", srv.port, "http", "cliservice", False)
        want, inputs = in_process(spark, setup, model)
        header, *rows = beeline(url, query(inputs), PASSWORD)
        assertDataFrameEqual(spark.createDataFrame([(e, float(p)) for e, p in rows], want.schema), want, rtol=1e-9)

        def over_http(user: str, password: str) -> list[tuple]:
            transport = THttpClient.THttpClient(f"http://127.0.0.1:{srv.port}/cliservice")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            transport.setCustomHeaders({"Authorization": f"Basic {token}"})
            conn = hive.connect(thrift_transport=transport)
            try:
                cursor = conn.cursor()
                cursor.execute(query(inputs))
                return cursor.fetchall()
            finally:
                conn.close()

        assertDataFrameEqual(spark.createDataFrame(over_http("analyst", PASSWORD), want.schema), want, rtol=1e-9)
        with pytest.raises(TTransportException):  # HTTP 401: the answer holds no Thrift frame
            over_http("analyst", "wrong-password")
        with pytest.raises(TTransportException):  # only the configured user name is admitted
            over_http("someone-else", PASSWORD)
        with pytest.raises(RuntimeError, match="HTTP Response code: 401"):
            beeline(url, "SELECT 1", "wrong-password")
    finally:
        assert srv.stop() == 0, "\n".join(srv.seen[-40:])


@pytest.mark.slow
def test_tls(setup, tmp_path):
    """With a keystore, clients must speak TLS; the keystore's password appears nowhere."""
    cfg, model, _ = setup
    keystore, truststore, cert = tmp_path / "server.jks", tmp_path / "trust.jks", tmp_path / "server.cer"
    store_password = "keystore-secret-123"
    for args in (["-genkeypair", "-alias", "tfos", "-keyalg", "RSA", "-keysize", "2048", "-validity", "2",
                  "-dname", "CN=localhost", "-ext", "SAN=dns:localhost,ip:127.0.0.1", "-keystore", str(keystore),
                  "-storepass", store_password, "-keypass", store_password, "-storetype", "JKS"],
                 ["-exportcert", "-alias", "tfos", "-keystore", str(keystore), "-storepass", store_password,
                  "-file", str(cert)],
                 ["-importcert", "-noprompt", "-alias", "tfos", "-file", str(cert), "-keystore", str(truststore),
                  "-storepass", "truststore-123", "-storetype", "JKS"]):
        subprocess.run(["keytool", *args], check=True, capture_output=True, timeout=120)
    overrides = ["spark.master=local[2]", f"predict.model={model}", "serve_sql.auth=none",  # loopback
                 f"serve_sql.tls_keystore={keystore}",
                 "serve_sql.tls_keystore_password_env=TEST_KEYSTORE_PASSWORD",
                 *(f"sources.{n}.path={s.path}" for n, s in cfg.sources.items())]
    srv = Server(CENSUS, overrides, free_port(), {"TEST_KEYSTORE_PASSWORD": store_password})
    try:
        url = srv.wait_for(contract.READY).split()[-1]
        assert url.endswith(";ssl=true")
        secure = f"{url};sslTrustStore={truststore};trustStorePassword=truststore-123"
        assert beeline(secure, "SELECT 41 + 1 AS answer", "unused") == [["answer"], ["42"]]
        with pytest.raises(RuntimeError, match="Could not open client transport"):
            beeline(url.removesuffix(";ssl=true"), "SELECT 1", "unused")
    finally:
        assert srv.stop() == 0, "\n".join(srv.seen[-40:])
        while not srv.lines.empty():
            line = srv.lines.get()
            if line is not None:
                srv.seen.append(line)
    assert not [line for line in srv.seen if store_password in line]


@pytest.mark.slow
def test_beeline_over_jvm_scoring_needs_no_python_on_the_executors(spark, setup, tmp_path):
    """`predict.engine = "jvm"` on a cluster whose executors' Python does not exist: the function scores inside the
    executor JVMs, EXPLAIN over JDBC shows no Python evaluation, and beeline gets tfos sql's numbers."""
    cfg, model, _ = setup
    config_file = tmp_path / "serve.toml"
    write_config(config_file, model)
    overrides = ["spark.master=local-cluster[2,1,1024]", "spark.conf.spark.pyspark.python=/nonexistent/bin/python3",
                 "predict.engine=jvm", *(f"sources.{n}.path={s.path}" for n, s in cfg.sources.items())]
    srv = Server(config_file, overrides, free_port(), {"TFOS_SQL_PASSWORD": PASSWORD})
    try:
        srv.wait_for(contract.READY)
        want, inputs = in_process(spark, setup, model)
        url = contract.jdbc_url("127.0.0.1", srv.port, "binary", "cliservice", False)
        explained = "\n".join(",".join(r) for r in beeline(url, "EXPLAIN " + query(inputs), PASSWORD))
        assert "TFBatchEval" in explained and "Python" not in explained and "ArrowEval" not in explained, explained
        header, *rows = beeline(url, query(inputs), PASSWORD)
        assert header == ["education", "p"]
        assertDataFrameEqual(spark.createDataFrame([(e, float(p)) for e, p in rows], want.schema), want, rtol=1e-6)
    finally:
        assert srv.stop() == 0, "\n".join(srv.seen[-40:])
