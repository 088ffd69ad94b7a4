"""The real-component fixtures (tests/hadoop/fixtures.py) for the tests of this directory."""
from tests.hadoop.fixtures import hdfs_dir, isolated_cluster, minidfs, s3_dir, s3_server  # noqa: F401
