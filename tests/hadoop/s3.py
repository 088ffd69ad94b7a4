"""An S3 server for tests: S3Proxy on 127.0.0.1 with a filesystem backend and real authentication
(AWS signature v2 or v4, with an access key and secret generated at each start).

    with S3Server(tmp_path / "s3") as s3:
        conf = s3.spark_conf()                 # spark.hadoop.fs.s3a.* and spark.jars for S3A
        ... spark writes s3.url("data/t") ...  # s3a://BUCKET/data/t
        s3.list_keys("data/t/")                # what the server holds, asked over its S3 API

The objects are plain files under `base_dir/data/BUCKET/`. S3Proxy 4.1.0's filesystem-nio2 backend:
2.6.0's backends break on what S3A does (directory markers without sizes, CRC32 checksum headers
on DeleteObjects, a 5 s sleep per non-empty "directory" delete).

As a script, running until interrupted: `python -m tests.hadoop.s3 --dir D` prints the Spark
settings, one `--conf key=value` a line.
"""
from __future__ import annotations

import argparse
import base64
import email.utils
import hashlib
import hmac
import os
import secrets
import signal
import string
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.hadoop import support

REGION = "us-east-1"
CREDENTIALS_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def _random(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


class S3Server:
    """Starts on `start()` (or `with`); `stop()` kills the JVM and its process group.

    endpoint    http://127.0.0.1:PORT
    access_key, secret_key   valid for this start only
    bucket      created at start
    region      us-east-1 (S3Proxy accepts any; the SDK needs one)
    """

    def __init__(self, base_dir: Path | str, bucket: str = "tfos-test", start_timeout: float = 60):
        self.base_dir = Path(base_dir).resolve()
        self.bucket = bucket
        self.region = REGION
        self.start_timeout = start_timeout
        self.data_dir = self.base_dir / "data"
        self.log = self.base_dir / "s3proxy.log"
        self.access_key = "AKIA" + _random(string.ascii_uppercase + string.digits, 16)
        self.secret_key = _random(string.ascii_letters + string.digits, 40)
        self.port: int | None = None
        self.endpoint: str | None = None
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen | None = None

    # ---- life cycle
    def start(self) -> "S3Server":
        if self._proc is not None:
            raise RuntimeError("S3Server already started")
        jar = support.jars("s3proxy")[0]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        for attempt in range(3):  # a free port can be taken between our probe and S3Proxy's bind
            self.port = support.free_port()
            self.endpoint = f"http://127.0.0.1:{self.port}"
            props = self.base_dir / "s3proxy.properties"
            props.write_text("\n".join([
                f"s3proxy.endpoint={self.endpoint}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={self.access_key}",
                f"s3proxy.credential={self.secret_key}",
                "jclouds.provider=filesystem-nio2",
                f"jclouds.filesystem.basedir={self.data_dir}",
                "jclouds.identity=local",       # the backend's own (unused) credentials
                "jclouds.credential=local",
                "",
            ]))
            self.log.unlink(missing_ok=True)
            env = {**os.environ, "LOG_LEVEL": "warn"}
            self._proc = support.spawn(
                [support.java(), "-Xmx384m", "-Dlogback.statusListenerClass=ch.qos.logback.core.status.NopStatusListener",
                 "-jar", jar, "--properties", props], self.log, env=env, cwd=self.base_dir)
            try:
                support.wait_until(self._answers, self._proc, self.start_timeout, "S3Proxy", self.log, 0.1)
                break
            except RuntimeError:
                in_use = "Address already in use" in support.tail(self.log, 200)
                self.stop()
                if not in_use or attempt == 2:
                    raise
            except BaseException:
                self.stop()
                raise
        self.startup_seconds = time.monotonic() - started
        try:
            self.create_bucket(self.bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
            return True
        except urllib.error.HTTPError:
            return True  # 403 to an anonymous request: it is up
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None:
            support.kill_group(self._proc, grace=2)
            self._proc = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- for Spark
    def url(self, path: str = "") -> str:
        """s3a://BUCKET/path"""
        return f"s3a://{self.bucket}/{path.lstrip('/')}"

    @staticmethod
    def jars() -> list[str]:
        """hadoop-aws 3.5.0 and the AWS SDK v2 modules it needs (pyspark has netty, httpclient, slf4j)."""
        return [str(p) for p in support.jars("s3a")]

    def hadoop_conf(self, access_key: str | None = None, secret_key: str | None = None,
                    fail_fast: bool = False) -> dict[str, str]:
        """The fs.s3a.* settings (Hadoop configuration keys) for this server. With fail_fast, one
        retry instead of S3A's and the SDK's defaults: an unreachable endpoint fails in ~2 s, not ~4
        minutes (a 403 or 404 is never retried either way)."""
        retries = {"fs.s3a.attempts.maximum": "1", "fs.s3a.retry.limit": "1",
                   "fs.s3a.retry.interval": "100ms"} if fail_fast else {}
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.path.style.access": "true",             # http://127.0.0.1:PORT/BUCKET/key
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.aws.credentials.provider": CREDENTIALS_PROVIDER,
            "fs.s3a.access.key": access_key if access_key is not None else self.access_key,
            "fs.s3a.secret.key": secret_key if secret_key is not None else self.secret_key,
            **retries,
        }

    def spark_conf(self, access_key: str | None = None, secret_key: str | None = None,
                   jars: bool = True, fail_fast: bool = False) -> dict[str, str]:
        """Everything a Spark session needs for s3a:// against this server: the Hadoop settings
        as spark.hadoop.*, and spark.jars (merge it with any spark.jars of your own)."""
        conf = {f"spark.hadoop.{k}": v for k, v in self.hadoop_conf(access_key, secret_key, fail_fast).items()}
        if jars:
            conf["spark.jars"] = ",".join(self.jars())
        return conf

    def submit_args(self, extra_jars: list[str] | tuple[str, ...] = (), access_key: str | None = None,
                    secret_key: str | None = None, fail_fast: bool = False) -> list[str]:
        """spark-submit arguments: `--jars` (extra_jars first) and a `--conf` per setting. A later
        --jars replaces an earlier one, so with scripts/tfos-submit pass its TFRecord jar in extra_jars."""
        args = ["--jars", ",".join([*map(str, extra_jars), *self.jars()])]
        for k, v in self.spark_conf(access_key, secret_key, jars=False, fail_fast=fail_fast).items():
            args += ["--conf", f"{k}={v}"]
        return args

    # ---- the server's own view, over its S3 API (AWS signature v2, no SDK needed)
    def request(self, method: str, path: str, query: dict[str, str] | None = None, body: bytes = b"",
                access_key: str | None = None, secret_key: str | None = None) -> tuple[int, bytes]:
        """A signed request; returns (HTTP status, body). `path` is /BUCKET[/key]."""
        if path.count("/") == 1:
            path += "/"  # a bucket's resource is /BUCKET/
        date = email.utils.formatdate(usegmt=True)
        content_type = "application/octet-stream"
        to_sign = f"{method}\n\n{content_type}\n{date}\n{urllib.parse.quote(path)}"
        key = secret_key if secret_key is not None else self.secret_key
        signature = base64.b64encode(hmac.new(key.encode(), to_sign.encode(), hashlib.sha1).digest()).decode()
        url = self.endpoint + urllib.parse.quote(path) + ("?" + urllib.parse.urlencode(query) if query else "")
        req = urllib.request.Request(url, data=body if method in ("PUT", "POST") else None, method=method, headers={
            "Date": date, "Content-Type": content_type,
            "Authorization": f"AWS {access_key or self.access_key}:{signature}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def create_bucket(self, name: str) -> None:
        status, body = self.request("PUT", f"/{name}")
        if status not in (200, 409):  # 409: BucketAlreadyOwnedByYou
            raise RuntimeError(f"S3Proxy: creating bucket {name} answered {status}: {body[:500]!r}")

    def list_keys(self, prefix: str = "", bucket: str | None = None) -> list[str]:
        """Every key under `prefix` (ListObjects, all pages)."""
        keys: list[str] = []
        marker = ""
        while True:
            query = {"prefix": prefix, **({"marker": marker} if marker else {})}
            status, body = self.request("GET", f"/{bucket or self.bucket}", query)
            if status != 200:
                raise RuntimeError(f"S3Proxy: listing {prefix!r} answered {status}: {body[:500]!r}")
            root = ET.fromstring(body)
            page = [c.findtext(f"{_S3_NS}Key") for c in root.iter(f"{_S3_NS}Contents")]
            keys += page
            if root.findtext(f"{_S3_NS}IsTruncated") != "true" or not page:
                return keys
            marker = page[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.hadoop.s3", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--bucket", default="tfos-test")
    args = ap.parse_args(argv)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with S3Server(args.dir, bucket=args.bucket) as s3:
        for k, v in s3.spark_conf().items():
            print(f"--conf {k}={v}")
        print(f"(S3Proxy up in {s3.startup_seconds:.1f} s at {s3.endpoint}, bucket {s3.bucket}; "
              f"log {s3.log}; Ctrl-C or TERM stops it)", file=sys.stderr)
        sys.stdout.flush()
        try:
            while not stop and s3.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
