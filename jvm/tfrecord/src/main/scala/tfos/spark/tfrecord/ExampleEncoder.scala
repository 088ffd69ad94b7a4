package tfos.spark.tfrecord

import java.nio.charset.StandardCharsets.UTF_8

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, SpecializedGetters}
import org.apache.spark.sql.catalyst.util.ArrayData
import org.apache.spark.sql.types._

import FeatureSchema.{BytesKind, FloatKind, Int64Kind}
import ProtoBuffer.{fieldSize, varintSize}

/**
 * Encodes rows as tf.train.Example or tf.train.SequenceExample:
 *   Example{features=1: Features{feature=1: map<string, Feature>}}
 *   SequenceExample{context=1: Features, feature_lists=2: FeatureLists{feature_list=1: map<string, FeatureList>}}
 *   Feature{bytes_list=1 | float_list=2 | int64_list=3}, FeatureList{feature=1: repeated Feature}
 * Protobuf puts each message's length before its body, so a first pass computes sizes and a
 * second pass writes straight into the task's reused buffer; nothing is built per record.
 */
final class ExampleEncoder(schema: StructType, sequence: Boolean) {
  private val cols = FeatureSchema.columns(schema, sequence)
  private val keys = cols.map(_.name.getBytes(UTF_8))
  // Filled by the size pass, read by the write pass. entries(i) == -1 marks a null cell.
  private val entries = new Array[Int](cols.length) // map entry size
  private val bodies = new Array[Int](cols.length) // Feature or FeatureList message size
  private val payloads = new Array[Int](cols.length) // value bytes inside the list message
  private val sources = new Array[SpecializedGetters](cols.length) // row or array holding the values
  private val starts = new Array[Int](cols.length)
  private val counts = new Array[Int](cols.length)
  // Scalar binaries are held here so UnsafeRow.getBinary (a copy) runs once per cell, not twice.
  private val binaryHolders = cols.map(_ => new GenericInternalRow(1))

  def encode(row: InternalRow, buf: ProtoBuffer): Unit = {
    var context = 0
    var lists = 0
    var i = 0
    while (i < cols.length) {
      val c = cols(i)
      if (row.isNullAt(c.index)) {
        entries(i) = -1
      } else {
        if (c.depth == 2) {
          val outer = row.getArray(c.index)
          sources(i) = outer
          bodies(i) = featureListSize(c, outer)
        } else {
          prepareSource(i, c, row)
          payloads(i) = payloadSize(c, sources(i), starts(i), counts(i))
          bodies(i) = featureSize(c.kind, counts(i), payloads(i))
        }
        entries(i) = fieldSize(keys(i).length) + fieldSize(bodies(i))
        if (c.depth == 2) lists += fieldSize(entries(i)) else context += fieldSize(entries(i))
      }
      i += 1
    }
    buf.ensure(fieldSize(context) + (if (sequence) fieldSize(lists) else 0))
    buf.writeLen(1, context) // Example.features or SequenceExample.context
    writeEntries(buf, lists = false)
    if (sequence) {
      buf.writeLen(2, lists) // SequenceExample.feature_lists
      writeEntries(buf, lists = true)
    }
  }

  private def prepareSource(i: Int, c: FeatureColumn, row: InternalRow): Unit =
    if (c.depth == 1) {
      val a = row.getArray(c.index)
      checkNoNulls(c, a)
      sources(i) = a; starts(i) = 0; counts(i) = a.numElements()
    } else if (c.elemType == BinaryType) {
      binaryHolders(i).update(0, row.getBinary(c.index))
      sources(i) = binaryHolders(i); starts(i) = 0; counts(i) = 1
    } else {
      sources(i) = row; starts(i) = c.index; counts(i) = 1
    }

  private def writeEntries(buf: ProtoBuffer, lists: Boolean): Unit = {
    var i = 0
    while (i < cols.length) {
      val c = cols(i)
      if (entries(i) >= 0 && (c.depth == 2) == lists) {
        buf.writeLen(1, entries(i)) // one map entry: key=1, value=2
        buf.writeLen(1, keys(i).length)
        buf.writeBytes(keys(i))
        buf.writeLen(2, bodies(i))
        if (lists) writeFeatureList(buf, c, sources(i).asInstanceOf[ArrayData])
        else writeFeature(buf, c, sources(i), starts(i), counts(i), payloads(i))
      }
      i += 1
    }
  }

  private def checkNoNulls(c: FeatureColumn, a: ArrayData): Unit = {
    var k = 0
    while (k < a.numElements()) {
      if (a.isNullAt(k)) throw nullElement(c)
      k += 1
    }
  }

  private def nullElement(c: FeatureColumn) = new IllegalArgumentException(
    s"tfos-tfrecord: column '${c.name}' has a null element inside an array; " +
      "TFRecord lists cannot hold nulls, filter or fill them before writing")

  /** Size of the list message's contents: packed numbers, or repeated bytes fields. */
  private def payloadSize(c: FeatureColumn, g: SpecializedGetters, start: Int, n: Int): Int = c.kind match {
    case FloatKind => 4 * n
    case Int64Kind =>
      var size = 0
      var k = start
      while (k < start + n) { size += varintSize(longAt(c.elemType, g, k)); k += 1 }
      size
    case _ =>
      var size = 0
      var k = start
      while (k < start + n) {
        size += fieldSize(if (c.elemType == StringType) g.getUTF8String(k).numBytes else g.getBinary(k).length)
        k += 1
      }
      size
  }

  /** Size of a Feature whose list holds n values; an empty packed field is left out entirely. */
  private def featureSize(kind: Int, n: Int, payload: Int): Int = fieldSize(listSize(kind, n, payload))

  private def listSize(kind: Int, n: Int, payload: Int): Int =
    if (kind == BytesKind) payload else if (n == 0) 0 else fieldSize(payload)

  private def featureListSize(c: FeatureColumn, outer: ArrayData): Int = {
    var size = 0
    var j = 0
    while (j < outer.numElements()) {
      if (outer.isNullAt(j)) throw nullElement(c)
      val inner = outer.getArray(j)
      checkNoNulls(c, inner)
      size += fieldSize(featureSize(c.kind, inner.numElements(), payloadSize(c, inner, 0, inner.numElements())))
      j += 1
    }
    size
  }

  private def writeFeatureList(buf: ProtoBuffer, c: FeatureColumn, outer: ArrayData): Unit = {
    var j = 0
    while (j < outer.numElements()) {
      val inner = outer.getArray(j)
      val n = inner.numElements()
      val payload = payloadSize(c, inner, 0, n) // recomputed: cheaper than storing per inner list
      buf.writeLen(1, featureSize(c.kind, n, payload))
      writeFeature(buf, c, inner, 0, n, payload)
      j += 1
    }
  }

  private def writeFeature(buf: ProtoBuffer, c: FeatureColumn, g: SpecializedGetters, start: Int, n: Int,
                           payload: Int): Unit = {
    buf.writeLen(c.kind, listSize(c.kind, n, payload))
    var k = start
    c.kind match {
      case Int64Kind =>
        if (n > 0) buf.writeLen(1, payload)
        while (k < start + n) { buf.writeVarint(longAt(c.elemType, g, k)); k += 1 }
      case FloatKind =>
        if (n > 0) buf.writeLen(1, payload)
        while (k < start + n) { buf.writeFloat(floatAt(c.elemType, g, k)); k += 1 }
      case _ =>
        while (k < start + n) {
          if (c.elemType == StringType) {
            val s = g.getUTF8String(k)
            buf.writeLen(1, s.numBytes)
            buf.writeUtf8(s)
          } else {
            val b = g.getBinary(k)
            buf.writeLen(1, b.length)
            buf.writeBytes(b)
          }
          k += 1
        }
    }
  }

  private def longAt(t: DataType, g: SpecializedGetters, k: Int): Long = t match {
    case LongType => g.getLong(k)
    case IntegerType => g.getInt(k)
    case ShortType => g.getShort(k)
    case ByteType => g.getByte(k)
    case _ => if (g.getBoolean(k)) 1L else 0L
  }

  private def floatAt(t: DataType, g: SpecializedGetters, k: Int): Float = t match {
    case FloatType => g.getFloat(k)
    case DoubleType => g.getDouble(k).toFloat
    case d: DecimalType => g.getDecimal(k, d.precision, d.scale).toFloat
  }
}
