package tfos.spark.tfrecord

import java.io.{BufferedOutputStream, OutputStream}

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.TaskAttemptContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.execution.datasources.{OutputWriter, OutputWriterFactory}
import org.apache.spark.sql.types.StructType

/** Shipped to each write task; names files `.tfrecord` plus the codec's extension (e.g. `.tfrecord.gz`). */
final class TFRecordOutputWriterFactory(options: TFRecordOptions) extends OutputWriterFactory {
  override def getFileExtension(context: TaskAttemptContext): String =
    ".tfrecord" + options.codec(context.getConfiguration).map(_.getDefaultExtension).getOrElse("")

  override def newInstance(path: String, dataSchema: StructType, context: TaskAttemptContext): OutputWriter =
    new TFRecordOutputWriter(path, dataSchema, options, context.getConfiguration)
}

/**
 * Writes one file. `dataSchema` excludes partition columns: Spark projects them away before
 * `write`, so they never reach the records. `path` must be a member: abstract in Spark 4.
 */
final class TFRecordOutputWriter(val path: String, dataSchema: StructType, options: TFRecordOptions,
                                 conf: Configuration) extends OutputWriter {
  private val out: OutputStream = {
    val file = new Path(path)
    val raw = file.getFileSystem(conf).create(file, false)
    val stream = options.codec(conf).map(c => c.createOutputStream(raw): OutputStream).getOrElse(raw)
    new BufferedOutputStream(stream, 1 << 17)
  }
  private val framing = new RecordWriter(out)
  private val encoder =
    if (options.recordType == RecordType.ByteArray) null else new ExampleEncoder(dataSchema, options.sequence)

  override def write(row: InternalRow): Unit = {
    val buf = framing.begin()
    if (encoder != null) encoder.encode(row, buf)
    else {
      if (row.isNullAt(0)) throw new IllegalArgumentException(
        s"tfos-tfrecord: column '${dataSchema.head.name}' is null; recordType=ByteArray cannot write null records")
      val bytes = row.getBinary(0)
      buf.ensure(bytes.length)
      buf.writeBytes(bytes)
    }
    framing.finish()
  }

  override def close(): Unit = out.close()
}
