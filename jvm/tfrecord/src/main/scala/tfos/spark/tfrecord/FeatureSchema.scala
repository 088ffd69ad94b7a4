package tfos.spark.tfrecord

import org.apache.spark.sql.types._

/**
 * One Spark column seen as a tf.train.Feature: the kind of list it maps to and its depth
 * (0 = scalar, 1 = list, 2 = SequenceExample feature list). `index` is the column ordinal.
 */
final case class FeatureColumn(name: String, index: Int, dataType: DataType, elemType: DataType, depth: Int) {
  val kind: Int = FeatureSchema.kindOf(elemType)
}

object FeatureSchema {
  // Equal to the field numbers of Feature's oneof, so a kind doubles as its wire field number.
  val BytesKind = 1
  val FloatKind = 2
  val Int64Kind = 3

  def kindOf(t: DataType): Int = t match {
    case LongType | IntegerType | ShortType | ByteType | BooleanType => Int64Kind
    case FloatType | DoubleType | _: DecimalType => FloatKind
    case StringType | BinaryType => BytesKind
    case _ => 0
  }

  def kindName(kind: Int): String = kind match {
    case BytesKind => "BytesList"
    case FloatKind => "FloatList"
    case Int64Kind => "Int64List"
    case _ => "empty Feature"
  }

  /** Type given to a feature by schema inference. */
  def inferredType(kind: Int): DataType = kind match {
    case Int64Kind => LongType
    case FloatKind => FloatType
    case _ => StringType
  }

  /** Maps each column of an Example / SequenceExample schema; fails naming the first bad column. */
  def columns(schema: StructType, sequence: Boolean): Array[FeatureColumn] =
    schema.fields.zipWithIndex.map { case (field, i) =>
      val (elem, depth) = field.dataType match {
        case ArrayType(ArrayType(e, _), _) if sequence => (e, 2)
        case ArrayType(e, _) => (e, 1)
        case t => (t, 0)
      }
      if (kindOf(elem) == 0) {
        val hint = if (depth == 1 && elem.isInstanceOf[ArrayType]) " (nested arrays need recordType=SequenceExample)" else ""
        throw new IllegalArgumentException(
          s"tfos-tfrecord: column '${field.name}' has unsupported type ${field.dataType.simpleString}$hint; " +
            "supported: numeric, boolean, string, binary and arrays of them")
      }
      FeatureColumn(field.name, i, field.dataType, elem, depth)
    }

  val ByteArrayColumn = "byteArray"

  /** recordType=ByteArray writes exactly one binary column as the raw record bytes. */
  def checkByteArraySchema(schema: StructType): Unit =
    if (schema.length != 1 || schema.head.dataType != BinaryType) {
      throw new IllegalArgumentException(
        "tfos-tfrecord: recordType=ByteArray needs exactly one binary column, got " +
          schema.fields.map(f => s"'${f.name}' ${f.dataType.simpleString}").mkString(", "))
    }

  /** Validates a write or read schema for the record type; throws naming the offending column. */
  def check(schema: StructType, options: TFRecordOptions): Unit =
    if (options.recordType == RecordType.ByteArray) {
      if (schema.nonEmpty) checkByteArraySchema(schema)
    } else {
      columns(schema, options.sequence)
    }
}
