package tfos.spark.tfrecord

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, Path}
import org.apache.hadoop.mapreduce.Job
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.execution.datasources.{FileFormat, OutputWriterFactory, PartitionedFile}
import org.apache.spark.sql.sources.{DataSourceRegister, Filter}
import org.apache.spark.sql.types.{BinaryType, StructField, StructType}

/**
 * TFRecord data source: `format("tfos.spark.tfrecord")` or `format("tfos-tfrecord")`.
 * Options (as in LinkedIn's spark-tfrecord): recordType = Example | SequenceExample | ByteArray,
 * codec = none | gzip | a Hadoop codec class name (write only; reads detect it by extension).
 * Without a schema, reading infers one from the first file in path order that holds a record
 * (inferSchemaFiles = N for the first N, or all): a feature no sampled record holds is not a column.
 */
class DefaultSource extends FileFormat with DataSourceRegister {
  override def shortName(): String = "tfos-tfrecord" // not "tfrecord": that is LinkedIn's jar

  override def toString: String = "tfos-tfrecord"

  // A record can start anywhere, and compressed streams cannot be entered mid-way.
  override def isSplitable(session: SparkSession, options: Map[String, String], path: Path): Boolean = false

  override def inferSchema(session: SparkSession, options: Map[String, String],
                           files: Seq[FileStatus]): Option[StructType] = {
    val opts = TFRecordOptions(options)
    if (opts.recordType == RecordType.ByteArray) {
      Some(StructType(Seq(StructField(FeatureSchema.ByteArrayColumn, BinaryType, nullable = true))))
    } else if (files.isEmpty) {
      None // Spark then reports that the schema cannot be inferred
    } else {
      val conf = new Configuration(session.sparkContext.hadoopConfiguration)
      options.foreach { case (k, v) => conf.set(k, v) }
      // Sorted: a stable sample and column order. Empty files hold no record; a sample that holds
      // none either (a compressed empty file) gives way to the next files.
      val paths = files.filter(_.getLen > 0).map(_.getPath.toString).sorted
      val samples = opts.inferFiles.fold(Iterator.single(paths))(n => paths.grouped(n))
      val serializable = new SerializableConf(conf)
      Some(samples.map(SchemaInference.infer(session, serializable, _, opts)).find(_.nonEmpty).getOrElse(StructType(Nil)))
    }
  }

  override def prepareWrite(session: SparkSession, job: Job, options: Map[String, String],
                            dataSchema: StructType): OutputWriterFactory = {
    val opts = TFRecordOptions(options)
    if (opts.recordType == RecordType.ByteArray) FeatureSchema.checkByteArraySchema(dataSchema)
    else FeatureSchema.check(dataSchema, opts)
    opts.codec(job.getConfiguration) // unknown codec: fail on the driver, not in every task
    new TFRecordOutputWriterFactory(opts)
  }

  override def buildReader(session: SparkSession, dataSchema: StructType, partitionSchema: StructType,
                           requiredSchema: StructType, filters: Seq[Filter], options: Map[String, String],
                           hadoopConf: Configuration): PartitionedFile => Iterator[InternalRow] = {
    val opts = TFRecordOptions(options)
    FeatureSchema.check(requiredSchema, opts)
    val conf = session.sparkContext.broadcast(new SerializableConf(hadoopConf))
    (file: PartitionedFile) => TFRecordScan.rows(file.toPath, conf.value.value, requiredSchema, opts)
  }

  override def equals(other: Any): Boolean = other.isInstanceOf[DefaultSource]

  override def hashCode(): Int = getClass.hashCode()
}
