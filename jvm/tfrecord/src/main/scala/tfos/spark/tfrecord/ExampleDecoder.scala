package tfos.spark.tfrecord

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeArrayData}
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.types.UTF8String

import FeatureSchema.kindName

/**
 * Decodes serialized Examples / SequenceExamples into rows of `schema` (the columns the query
 * needs: features not in it are skipped). A feature missing from a record leaves its column null.
 * One decoder per file, so errors can name the file.
 */
final class ExampleDecoder(schema: StructType, sequence: Boolean, path: String) extends FeatureWalker(sequence) {
  private val cols = FeatureSchema.columns(schema, sequence)
  private val byName = new java.util.HashMap[String, FeatureColumn]()
  cols.foreach(c => byName.put(c.name, c))
  private val values = new FeatureValues
  private var row: GenericInternalRow = _

  def decode(buf: Array[Byte], length: Int): InternalRow = {
    row = new GenericInternalRow(cols.length)
    if (cols.nonEmpty) walk(buf, length) // e.g. count(): no column needed, nothing to parse
    row
  }

  override protected def onFeature(key: String, feature: ProtoReader): Unit = {
    val c = byName.get(key)
    if (c != null) {
      if (c.depth == 2) throw mismatch(key, c, "a context feature")
      row.update(c.index, toSpark(c, key, feature))
    }
  }

  override protected def onFeatureList(key: String, list: ProtoReader): Unit = {
    val c = byName.get(key)
    if (c != null) {
      if (c.depth != 2) throw mismatch(key, c, "a feature list")
      val steps = new ArrayBuffer[Any]()
      while (list.hasMore) {
        val tag = list.readTag()
        if (tag == ((1 << 3) | 2)) steps += toSpark(c, key, list.sub()) else list.skip(tag & 7)
      }
      row.update(c.index, new GenericArrayData(steps.toArray))
    }
  }

  /** Converts one Feature to the column's value: a scalar for depth 0, an array otherwise. */
  private def toSpark(c: FeatureColumn, key: String, feature: ProtoReader): Any = {
    values.parse(feature)
    if (values.kind != 0 && values.kind != c.kind) throw mismatch(key, c, "a " + kindName(values.kind))
    val n = values.count
    if (c.depth == 0) {
      if (n != 1) throw new IllegalArgumentException(
        s"tfos-tfrecord: feature '$key' in file $path has $n values but column '${c.name}' is a scalar " +
          s"${c.dataType.simpleString}; declare it as array<${c.dataType.simpleString}>")
      element(c.elemType, 0)
    } else c.elemType match {
      // The two inferred numeric types are copied in one go; the rest go element by element.
      case LongType => UnsafeArrayData.fromPrimitiveArray(values.longs, Platform.LONG_ARRAY_OFFSET, n, 8)
      case FloatType => UnsafeArrayData.fromPrimitiveArray(values.floats, Platform.FLOAT_ARRAY_OFFSET, n, 4)
      case t =>
        val out = new Array[Any](n)
        var k = 0
        while (k < n) { out(k) = element(t, k); k += 1 }
        new GenericArrayData(out)
    }
  }

  private def element(t: DataType, k: Int): Any = t match {
    case LongType => values.longs(k)
    case IntegerType => values.longs(k).toInt
    case ShortType => values.longs(k).toShort
    case ByteType => values.longs(k).toByte
    case BooleanType => values.longs(k) != 0
    case FloatType => values.floats(k)
    case DoubleType => values.floats(k).toDouble
    case d: DecimalType =>
      val v = Decimal(values.floats(k).toDouble)
      if (v.changePrecision(d.precision, d.scale)) v else null
    case StringType => UTF8String.fromBytes(bytes(k)) // copied: the record buffer is reused
    case _ => bytes(k)
  }

  private def bytes(k: Int): Array[Byte] =
    java.util.Arrays.copyOfRange(values.buf, values.starts(k), values.starts(k) + values.lengths(k))

  private def mismatch(key: String, c: FeatureColumn, found: String) = new IllegalArgumentException(
    s"tfos-tfrecord: feature '$key' in file $path is $found, which does not fit column '${c.name}' " +
      s"of type ${c.dataType.simpleString}")
}
