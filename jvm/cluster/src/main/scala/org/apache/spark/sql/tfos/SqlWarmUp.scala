package org.apache.spark.sql.tfos

import java.io.{ByteArrayInputStream, ByteArrayOutputStream}

import scala.jdk.CollectionConverters._

import org.apache.arrow.vector.VectorSchemaRoot
import org.apache.arrow.vector.ipc.{ArrowStreamReader, ArrowStreamWriter}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection
import org.apache.spark.sql.execution.arrow.ArrowWriter
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.ArrowUtils
import org.apache.spark.sql.vectorized.{ArrowColumnVector, ColumnVector, ColumnarBatch}

/** What the executor's warm-up (`tfos.spark.cluster.WarmUpPlugin`) runs of Spark SQL's internals (private to its
  * packages): the session's settings, a generated projection and an Arrow round trip of `row`, as a task of a Python
  * function over rows of `schema` (a TF node's task, a prediction function's) first does them. */
object SqlWarmUp {
  def run(schema: StructType, row: InternalRow): Unit = {
    SQLConf.get
    UnsafeProjection.create(schema).apply(row)
    arrowRoundTrip(schema, row)
  }

  /** `row` written to an Arrow stream as the Python runner writes its input, and read back as it reads results. */
  private def arrowRoundTrip(schema: StructType, row: InternalRow): Unit = {
    val allocator = ArrowUtils.rootAllocator.newChildAllocator("tfos-warm-up", 0, Long.MaxValue)
    try {
      val out = new ByteArrayOutputStream()
      val root = VectorSchemaRoot.create(ArrowUtils.toArrowSchema(schema, "UTC", true, false, false), allocator)
      try {
        val writer = ArrowWriter.create(root)
        writer.write(row)
        writer.finish()
        val stream = new ArrowStreamWriter(root, null, out)
        stream.start()
        stream.writeBatch()
        stream.end()
      } finally root.close()
      val reader = new ArrowStreamReader(new ByteArrayInputStream(out.toByteArray), allocator)
      try {
        while (reader.loadNextBatch()) {
          val read = reader.getVectorSchemaRoot
          val columns: Array[ColumnVector] = read.getFieldVectors.asScala.map(new ArrowColumnVector(_)).toArray
          new ColumnarBatch(columns, read.getRowCount).rowIterator().asScala.foreach(_.numFields)
        }
      } finally reader.close()
    } finally allocator.close()
  }
}
