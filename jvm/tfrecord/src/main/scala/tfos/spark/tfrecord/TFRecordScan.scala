package tfos.spark.tfrecord

import java.io.{BufferedInputStream, IOException, InputStream}

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.io.compress.CompressionCodecFactory
import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.types.StructType

/** Opens TFRecord files and turns them into rows. */
object TFRecordScan {
  /** Decompresses by file extension (.gz, .bz2, ... as Hadoop's codec factory knows them). */
  def open(path: Path, conf: Configuration): RecordReader = {
    val raw = path.getFileSystem(conf).open(path)
    try {
      val codec = new CompressionCodecFactory(conf).getCodec(path)
      val in: InputStream = if (codec == null) raw else codec.createInputStream(raw)
      new RecordReader(new BufferedInputStream(in, 1 << 16), path.toString)
    } catch {
      case e: Throwable => raw.close(); throw e
    }
  }

  /** Calls `f` on every record of the file with the reader positioned on it; closes the file. */
  def foreachRecord(path: Path, conf: Configuration)(f: RecordReader => Unit): Unit = {
    val reader = open(path, conf)
    try while (reader.next()) withOffset(reader)(f(reader)) finally reader.close()
  }

  def rows(path: Path, conf: Configuration, schema: StructType, options: TFRecordOptions): Iterator[InternalRow] = {
    val reader = open(path, conf)
    // Closes the file when the task ends even if the iterator is abandoned (e.g. a LIMIT).
    Option(TaskContext.get()).foreach(_.addTaskCompletionListener[Unit](_ => reader.close()))
    val decode: RecordReader => InternalRow = options.recordType match {
      case RecordType.ByteArray =>
        r => {
          val row = new GenericInternalRow(schema.length)
          if (schema.nonEmpty) row.update(0, java.util.Arrays.copyOf(r.data, r.length))
          row
        }
      case _ =>
        val decoder = new ExampleDecoder(schema, options.sequence, path.toString)
        r => decoder.decode(r.data, r.length)
    }
    new Iterator[InternalRow] {
      private var ready = false
      private var done = false

      override def hasNext: Boolean = {
        if (!ready && !done) {
          ready = reader.next()
          if (!ready) { done = true; reader.close() }
        }
        ready
      }

      override def next(): InternalRow = {
        if (!hasNext) throw new NoSuchElementException("end of TFRecord file")
        ready = false
        withOffset(reader)(decode(reader))
      }
    }
  }

  /** Malformed protobuf gets the file and record offset added, like framing errors. */
  private def withOffset[T](reader: RecordReader)(body: => T): T =
    try body catch {
      case e: MalformedRecordException =>
        throw new IOException(reader.corrupt(s"malformed protobuf record (${e.getMessage})").getMessage, e)
    }
}
