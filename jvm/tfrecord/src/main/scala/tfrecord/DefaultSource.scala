package tfrecord

/** `format("tfrecord")`, LinkedIn's short name for its spark-tfrecord source, resolved to this
  * package's source when LinkedIn's jar is not on the class path: Spark looks for a class
  * `tfrecord.DefaultSource` only when no source registers that short name, so with LinkedIn's jar
  * present its source is used, and the two never clash. */
class DefaultSource extends tfos.spark.tfrecord.DefaultSource
