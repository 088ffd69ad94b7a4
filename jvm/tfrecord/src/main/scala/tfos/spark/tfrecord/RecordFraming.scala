package tfos.spark.tfrecord

import java.io.{Closeable, IOException, InputStream, OutputStream}
import java.util.zip.CRC32C

/**
 * TFRecord framing: uint64 length (little endian), uint32 masked crc32c of those 8 bytes,
 * the data, uint32 masked crc32c of the data.
 */
object RecordFraming {
  val HeaderSize = 12
  val FooterSize = 4

  def maskedCrc(crc: CRC32C, b: Array[Byte], off: Int, len: Int): Int = {
    crc.reset()
    crc.update(b, off, len)
    val c = crc.getValue.toInt
    ((c >>> 15) | (c << 17)) + 0xa282ead8
  }

  def getIntLE(b: Array[Byte], off: Int): Int =
    (b(off) & 0xFF) | (b(off + 1) & 0xFF) << 8 | (b(off + 2) & 0xFF) << 16 | (b(off + 3) & 0xFF) << 24
}

/**
 * Frames records onto `out`. The record is encoded into `buffer` after a gap for the header,
 * so header, data and footer leave in a single write of the reused buffer.
 */
final class RecordWriter(out: OutputStream) {
  import RecordFraming._
  val buffer = new ProtoBuffer(1 << 16)
  private val crc = new CRC32C

  /** Returns the buffer positioned where the record data goes. */
  def begin(): ProtoBuffer = { buffer.pos = HeaderSize; buffer }

  def finish(): Unit = {
    val b = buffer
    val length = b.pos - HeaderSize
    val dataEnd = b.pos
    b.pos = 0
    b.writeFixed32(length) // uint64 length: low then high word
    b.writeFixed32(0)
    b.writeFixed32(maskedCrc(crc, b.bytes, 0, 8))
    b.pos = dataEnd
    b.ensure(FooterSize)
    b.writeFixed32(maskedCrc(crc, b.bytes, HeaderSize, length))
    out.write(b.bytes, 0, b.pos)
  }
}

/**
 * Reads framed records from a (decompressed) stream, checking both CRCs. After `next()`
 * returns true the record is in `data(0 until length)`; the array is reused.
 * Errors name the file and the byte offset of the record in the uncompressed stream.
 */
final class RecordReader(in: InputStream, path: String) extends Closeable {
  import RecordFraming._
  var data = new Array[Byte](1 << 16)
  var length = 0
  var recordOffset = 0L // where the current record starts
  private var nextOffset = 0L
  private val header = new Array[Byte](HeaderSize)
  private val crc = new CRC32C

  def next(): Boolean = {
    recordOffset = nextOffset
    val got = readFully(header, HeaderSize)
    if (got == 0) return false // clean end of file
    if (got < HeaderSize) throw corrupt("file ends inside a record header")
    if (maskedCrc(crc, header, 0, 8) != getIntLE(header, 8)) throw corrupt("length CRC mismatch")
    val len = (getIntLE(header, 0) & 0xFFFFFFFFL) | (getIntLE(header, 4).toLong << 32)
    if (len < 0 || len > Int.MaxValue - 16) throw corrupt(s"record length $len is too large")
    if (len > data.length) data = new Array[Byte](math.max(len.toInt, data.length * 2))
    length = len.toInt
    if (readFully(data, length) < length) throw corrupt("file ends inside record data")
    if (readFully(header, FooterSize) < FooterSize) throw corrupt("file ends inside a record's data CRC")
    if (maskedCrc(crc, data, 0, length) != getIntLE(header, 0)) throw corrupt("data CRC mismatch")
    nextOffset = recordOffset + HeaderSize + length + FooterSize
    true
  }

  def corrupt(what: String): IOException =
    new IOException(s"tfos-tfrecord: corrupt TFRecord file $path at byte offset $recordOffset: $what")

  /** Reads up to n bytes; fewer only at end of stream. Stream errors (e.g. EOF in a gzip member) get the path too. */
  private def readFully(b: Array[Byte], n: Int): Int = {
    var total = 0
    while (total < n) {
      val r = try in.read(b, total, n - total) catch {
        case e: IOException => throw new IOException(
          s"tfos-tfrecord: cannot read TFRecord file $path at byte offset $recordOffset: ${e.getMessage}", e)
      }
      if (r < 0) return total
      total += r
    }
    total
  }

  override def close(): Unit = in.close()
}
