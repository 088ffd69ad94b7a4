package tfos.spark.tfrecord

/**
 * Walks the features of one serialized Example or SequenceExample and hands each one,
 * by name, to the subclass: the decoder fills row columns, inference collects types.
 */
abstract class FeatureWalker(sequence: Boolean) {
  /** `feature` reads one Feature message (context or Example feature). */
  protected def onFeature(key: String, feature: ProtoReader): Unit

  /** `list` reads one FeatureList message (SequenceExample feature_lists only). */
  protected def onFeatureList(key: String, list: ProtoReader): Unit

  def walk(buf: Array[Byte], length: Int): Unit = {
    val record = new ProtoReader(buf, 0, length)
    while (record.hasMore) {
      val tag = record.readTag()
      // Example.features=1 / SequenceExample.context=1 and feature_lists=2 all wrap a map at field 1.
      if (tag == ((1 << 3) | 2)) walkMap(record.sub(), lists = false)
      else if (sequence && tag == ((2 << 3) | 2)) walkMap(record.sub(), lists = true)
      else record.skip(tag & 7)
    }
  }

  private def walkMap(map: ProtoReader, lists: Boolean): Unit = while (map.hasMore) {
    val tag = map.readTag()
    if (tag == ((1 << 3) | 2)) walkEntry(map.sub(), lists) else map.skip(tag & 7)
  }

  /** A map entry is {key=1, value=2}; missing fields take protobuf defaults ("" and an empty message). */
  private def walkEntry(entry: ProtoReader, lists: Boolean): Unit = {
    var key = ""
    var value = new ProtoReader(entry.buf, 0, 0)
    while (entry.hasMore) {
      val tag = entry.readTag()
      if (tag == ((1 << 3) | 2)) key = entry.readString()
      else if (tag == ((2 << 3) | 2)) value = entry.sub()
      else entry.skip(tag & 7)
    }
    if (lists) onFeatureList(key, value) else onFeature(key, value)
  }
}
