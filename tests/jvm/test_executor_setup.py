"""Every executor of a session the package builds runs its warm-up (the jar's `WarmUpPlugin`) and
tells the driver, and its Python workers import the installed pyspark, not Spark's zip
(`python_daemon`). Uses the shared `spark` fixture: local mode's executor is the driver's."""
from __future__ import annotations

import time

import pyspark


def test_the_executor_warmed_up_once_and_said_so(spark):
    deadline = time.monotonic() + 120
    report: dict[str, str] = {}
    while not report and time.monotonic() < deadline:
        report = dict(spark._jvm.tfos.spark.cluster.WarmUpPlugin.report())
        time.sleep(0.1)
    assert list(report) == ["driver"], report
    assert float(report["driver"]) > 0, report  # seconds, not "failed: ..."


def test_python_workers_import_the_installed_pyspark(spark):
    def where(batches):
        import sys

        import pyarrow as pa
        import pyspark as worker_pyspark

        zips = [p for p in sys.path if p.endswith("pyspark.zip")]
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"file": [worker_pyspark.__file__],
                                          "zip_after_site": [bool(zips) and sys.path.index(zips[0]) > max(
                                              i for i, p in enumerate(sys.path) if p.endswith("site-packages"))]})

    rows = spark.range(0, 4, 1, 2).mapInArrow(where, "file string, zip_after_site boolean").collect()
    assert {r.file for r in rows} == {pyspark.__file__}
    assert all(r.zip_after_site for r in rows), rows
