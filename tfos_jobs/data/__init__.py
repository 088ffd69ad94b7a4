"""Data, read and written by Spark (a library of the jobs): sources and JDBC, the joins and
aggregates (assemble.py, transforms.py), the split, sensor windows, TFRecords and the tf.data
reader, a prepared dataset's files (dataset.py), the embedded data sets and the anomaly figures."""
