package tfos.spark.tfrecord

import FeatureSchema.{BytesKind, FloatKind, Int64Kind, kindName}

/**
 * The values of one tf.train.Feature, parsed into scratch arrays reused across features.
 * Numeric lists are accepted packed (proto3 default) or unpacked (older writers).
 * Bytes values are kept as (start, length) spans into `buf`; the caller copies them out.
 */
final class FeatureValues {
  var kind: Int = 0 // 0 = no list set (an empty Feature)
  var count: Int = 0
  var longs = new Array[Long](16)
  var floats = new Array[Float](16)
  var starts = new Array[Int](16)
  var lengths = new Array[Int](16)
  var buf: Array[Byte] = _

  def parse(feature: ProtoReader): Unit = {
    kind = 0
    count = 0
    buf = feature.buf
    while (feature.hasMore) {
      val tag = feature.readTag()
      val field = tag >>> 3
      if (field >= BytesKind && field <= Int64Kind && (tag & 7) == 2) {
        kind = field // a later oneof member replaces an earlier one, as in protobuf
        count = 0
        parseList(feature.sub())
      } else {
        feature.skip(tag & 7)
      }
    }
  }

  private def parseList(list: ProtoReader): Unit = while (list.hasMore) {
    val tag = list.readTag()
    val wireType = tag & 7
    if ((tag >>> 3) != 1) list.skip(wireType)
    else if (kind == BytesKind && wireType == 2) {
      val n = list.readLength()
      grow()
      starts(count) = list.pos; lengths(count) = n; count += 1
      list.pos += n
    } else if (kind == FloatKind && wireType == 5) {
      addFloat(list.readFixed32())
    } else if (kind == FloatKind && wireType == 2) {
      val n = list.readLength()
      if (n % 4 != 0) throw new MalformedRecordException(s"packed FloatList of $n bytes")
      val end = list.pos + n
      while (list.pos < end) addFloat(list.readFixed32())
    } else if (kind == Int64Kind && wireType == 0) {
      addLong(list.readVarint())
    } else if (kind == Int64Kind && wireType == 2) {
      val n = list.readLength() // before reading pos: readLength moves it
      val end = list.pos + n
      while (list.pos < end) addLong(list.readVarint())
      if (list.pos != end) throw new MalformedRecordException("packed Int64List overruns its length")
    } else {
      throw new MalformedRecordException(s"wire type $wireType in ${kindName(kind)}")
    }
  }

  private def addFloat(bits: Int): Unit = { grow(); floats(count) = java.lang.Float.intBitsToFloat(bits); count += 1 }

  private def addLong(v: Long): Unit = { grow(); longs(count) = v; count += 1 }

  /** Makes room for one more value in the array of the current kind. */
  private def grow(): Unit = kind match {
    case Int64Kind if count == longs.length => longs = java.util.Arrays.copyOf(longs, count * 2)
    case FloatKind if count == floats.length => floats = java.util.Arrays.copyOf(floats, count * 2)
    case BytesKind if count == starts.length =>
      starts = java.util.Arrays.copyOf(starts, count * 2)
      lengths = java.util.Arrays.copyOf(lengths, count * 2)
    case _ =>
  }
}
