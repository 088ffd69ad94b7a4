"""`[spark]`: the session the jobs build."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

# Spark's own setting of the log level (SparkContext.setLogLevel at start), under `spark.conf`: at
# INFO or finer the package's log profile steps aside for Spark's (`tfos --verbose`).
LOG_LEVEL = "spark.log.level"

@dataclass(frozen=True)
class SparkConfig:
    """Session settings. `master` applies only when spark-submit did not set one.

    `packages` (Maven coordinates, e.g. JDBC drivers) are fetched from Maven Central when the
    session starts; `jars` are local jar files, for clusters without access to it. `hive = true`
    gives the session a Hive metastore catalog: the one `hive-site.xml` or
    `spark.hadoop.hive.metastore.uris` names, else an embedded Derby metastore kept with the
    table files under `warehouse`. `remote` (or the SPARK_REMOTE environment variable):
    `sc://host:port` of a Spark Connect server to use instead of starting a driver here; the
    server's own cluster, jars and settings then apply, and only `conf` that Spark lets a session
    change at run time (SQL settings) is set."""

    master: Union[str, None] = None
    remote: str = ""
    app_name: str = "tfos"
    conf: Mapping[str, str] = field(default_factory=dict)
    packages: tuple[str, ...] = ()
    jars: tuple[str, ...] = ()
    hive: bool = False
    warehouse: str = "spark-warehouse"

    def errors(self) -> list[str]:
        if self.remote and not self.remote.startswith("sc://"):
            return [f"spark.remote: {self.remote!r} is not a Spark Connect URL (sc://host:port)"]
        return []
