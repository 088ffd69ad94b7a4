package tfos.spark.tfrecord

import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.types.UTF8String

/**
 * Growable byte buffer with the few protobuf primitives tf.Example needs. One per write task,
 * reused for every record. Callers reserve room with `ensure` once per record, so the
 * individual writes do no bounds checks of their own.
 */
final class ProtoBuffer(initialSize: Int) {
  var bytes: Array[Byte] = new Array[Byte](initialSize)
  var pos: Int = 0

  def ensure(extra: Int): Unit = if (pos + extra > bytes.length) {
    bytes = java.util.Arrays.copyOf(bytes, math.max(bytes.length * 2, pos + extra))
  }

  def writeByte(b: Int): Unit = { bytes(pos) = b.toByte; pos += 1 }

  def writeVarint(value: Long): Unit = {
    var v = value
    while ((v & ~0x7FL) != 0) { bytes(pos) = ((v & 0x7F) | 0x80).toByte; pos += 1; v >>>= 7 }
    bytes(pos) = v.toByte
    pos += 1
  }

  /** Tag plus length of a length-delimited field. All our field numbers are < 16: one tag byte. */
  def writeLen(field: Int, length: Int): Unit = { writeByte((field << 3) | 2); writeVarint(length) }

  def writeFixed32(v: Int): Unit = {
    bytes(pos) = v.toByte; bytes(pos + 1) = (v >> 8).toByte
    bytes(pos + 2) = (v >> 16).toByte; bytes(pos + 3) = (v >> 24).toByte
    pos += 4
  }

  def writeFloat(f: Float): Unit = writeFixed32(java.lang.Float.floatToRawIntBits(f))

  def writeBytes(b: Array[Byte]): Unit = { System.arraycopy(b, 0, bytes, pos, b.length); pos += b.length }

  def writeUtf8(s: UTF8String): Unit = { s.writeToMemory(bytes, Platform.BYTE_ARRAY_OFFSET + pos); pos += s.numBytes }
}

object ProtoBuffer {
  /** Bytes of a varint; negative int64 values always take 10. */
  def varintSize(v: Long): Int = (70 - java.lang.Long.numberOfLeadingZeros(v | 1)) / 7

  /** Bytes of a length-delimited field (one tag byte + length + body). */
  def fieldSize(length: Int): Int = 1 + varintSize(length) + length
}
