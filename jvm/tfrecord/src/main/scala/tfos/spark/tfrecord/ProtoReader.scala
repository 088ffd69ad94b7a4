package tfos.spark.tfrecord

/** Thrown for bytes that are not valid protobuf; the scan adds the file path and record offset. */
final class MalformedRecordException(message: String) extends RuntimeException(message)

/** Cursor over one protobuf message inside `buf`, bounds-checked against the message end. */
final class ProtoReader(val buf: Array[Byte], var pos: Int, val end: Int) {
  def hasMore: Boolean = pos < end

  def readVarint(): Long = {
    var result = 0L
    var shift = 0
    while (shift < 64) {
      if (pos >= end) throw new MalformedRecordException("truncated varint")
      val b = buf(pos)
      pos += 1
      result |= (b & 0x7FL) << shift
      if (b >= 0) return result
      shift += 7
    }
    throw new MalformedRecordException("varint longer than 10 bytes")
  }

  def readTag(): Int = readVarint().toInt

  def readFixed32(): Int = {
    need(4)
    val v = (buf(pos) & 0xFF) | (buf(pos + 1) & 0xFF) << 8 | (buf(pos + 2) & 0xFF) << 16 | (buf(pos + 3) & 0xFF) << 24
    pos += 4
    v
  }

  /** Length prefix of a length-delimited field, checked to fit inside this message. */
  def readLength(): Int = {
    val n = readVarint()
    if (n < 0 || n > end - pos) throw new MalformedRecordException(s"field length $n exceeds message")
    n.toInt
  }

  /** Reader over an embedded message; this cursor moves past it. */
  def sub(): ProtoReader = {
    val n = readLength()
    val r = new ProtoReader(buf, pos, pos + n)
    pos += n
    r
  }

  def readString(): String = {
    val n = readLength()
    val s = new String(buf, pos, n, java.nio.charset.StandardCharsets.UTF_8)
    pos += n
    s
  }

  def skip(wireType: Int): Unit = wireType match {
    case 0 => readVarint()
    case 1 => need(8); pos += 8
    case 2 => pos += readLength()
    case 5 => need(4); pos += 4
    case w => throw new MalformedRecordException(s"unsupported wire type $w")
  }

  private def need(n: Int): Unit =
    if (end - pos < n) throw new MalformedRecordException("message ends inside a fixed-width field")
}
