"""The console's settings, decided before Spark starts: the log4j2 profile and how it merges with
the user's JVM options, and which failed SparkContext start is retried."""
from __future__ import annotations

from pathlib import Path

from tfos_jobs import resources, session_builder

PROFILE = f"-Dlog4j2.configurationFile={resources.log4j2_profile()}"
DERBY = {"spark.driver.extraJavaOptions": "-Dderby.system.home=/w"}

# What py4j raises when YARN's proxy filter arrives while the UI's handlers start (abridged from
# a client-mode run on YARN).
UI_RACE = """An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.
: java.util.ConcurrentModificationException
\tat java.base/java.util.ArrayList$ArrayListSpliterator.forEachRemaining(ArrayList.java:1631)
\tat org.sparkproject.jetty.servlet.ServletHandler.initialize(ServletHandler.java:749)
\tat org.sparkproject.jetty.servlet.ServletContextHandler.startContext(ServletContextHandler.java:392)
\tat org.apache.spark.ui.ServerInfo.addHandler(JettyUtils.scala:514)
\tat org.apache.spark.SparkContext.<init>(SparkContext.scala:688)"""


def test_the_profile_ships_with_the_package_and_quiets_the_known_lines():
    text = Path(resources.log4j2_profile()).read_text()
    assert "rootLogger.level = warn" in text
    for harmless in ("resolves to a loopback address", "org.apache.hadoop.util.NativeCodeLoader",
                     "could not bind on port", "No Partition Defined for Window operation"):
        assert harmless in text, harmless


def test_driver_and_local_executors_get_the_profile_beside_the_metastore_option():
    merged = session_builder.console_settings({}, DERBY, master="local-cluster[2,1,1024]", profile=True)
    assert merged == {"spark.driver.extraJavaOptions": f"-Dderby.system.home=/w {PROFILE}",
                      "spark.executor.extraJavaOptions": PROFILE}


def test_executors_elsewhere_keep_their_cluster_profile():
    """A standalone, YARN or Kubernetes executor cannot read a file of the driver's disk."""
    for master in ("yarn", "spark://h:7077", "k8s://https://h:6443"):
        assert session_builder.console_settings({}, {}, master=master, profile=True) == {
            "spark.driver.extraJavaOptions": PROFILE}, master


def test_a_users_own_log4j2_configuration_and_options_win():
    given = {"spark.driver.extraJavaOptions": "-Xss4m -Dlog4j2.configurationFile=/etc/mine.properties",
             "spark.executor.extraJavaOptions": "-Xss4m"}
    merged = session_builder.console_settings(given, DERBY, master="local[2]", profile=True)
    assert merged == {
        "spark.driver.extraJavaOptions": "-Dderby.system.home=/w -Xss4m -Dlog4j2.configurationFile=/etc/mine.properties",
        "spark.executor.extraJavaOptions": f"-Xss4m {PROFILE}"}


def test_verbose_leaves_spark_its_own_profile():
    assert session_builder.console_settings({}, DERBY, master="local[2]", profile=False) == DERBY
    assert set(session_builder.VERBOSE_LEVELS) >= {"INFO", "DEBUG"} and session_builder.DEFAULT_LOG_LEVEL == "WARN"


def test_only_the_ui_filter_race_is_retried():
    assert session_builder.is_ui_filter_race(UI_RACE)
    assert session_builder.is_ui_filter_race(RuntimeError(UI_RACE))
    other = UI_RACE.replace("ConcurrentModificationException", "IllegalStateException")
    assert not session_builder.is_ui_filter_race(other)
    assert not session_builder.is_ui_filter_race("java.util.ConcurrentModificationException\n\tat java.base/"
                                         "java.util.HashMap$HashIterator.nextNode(HashMap.java:1605)")
    assert not session_builder.is_ui_filter_race("Yarn application has already ended! It might have been killed")
