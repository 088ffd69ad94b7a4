package tfos.spark.tfrecord

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.io.compress.{CompressionCodec, CompressionCodecFactory}

/** What one TFRecord holds. Names match LinkedIn's spark-tfrecord so users can switch formats. */
sealed abstract class RecordType(val name: String) extends Serializable
object RecordType {
  case object Example extends RecordType("Example")
  case object SequenceExample extends RecordType("SequenceExample")
  case object ByteArray extends RecordType("ByteArray")
  val all: Seq[RecordType] = Seq(Example, SequenceExample, ByteArray)

  def parse(value: String): RecordType = all.find(_.name.equalsIgnoreCase(value.trim)).getOrElse(
    throw new IllegalArgumentException(
      s"tfos-tfrecord: unknown recordType '$value'; expected one of ${all.map(_.name).mkString(", ")}"))
}

/** Parsed reader/writer options. Serializable: shipped to executors inside closures and factories. */
final case class TFRecordOptions(recordType: RecordType, codecName: Option[String], inferFiles: Option[Int] = Some(1)) {
  def sequence: Boolean = recordType == RecordType.SequenceExample

  /** Output codec; resolved per task because codec objects are not serializable. */
  def codec(conf: Configuration): Option[CompressionCodec] = codecName.map { name =>
    // Hadoop's factory resolves aliases ("gzip", "GzipCodec") and class names of registered codecs.
    val codec = new CompressionCodecFactory(conf).getCodecByName(name)
    if (codec == null) throw new IllegalArgumentException(
      s"tfos-tfrecord: unknown codec '$name'; use none, gzip, bzip2, deflate or a codec class " +
        "registered in io.compression.codecs")
    codec
  }
}

object TFRecordOptions {
  def apply(options: Map[String, String]): TFRecordOptions = {
    // Spark usually passes a case-insensitive map, but do not rely on it.
    def get(key: String): Option[String] = options.collectFirst { case (k, v) if k.equalsIgnoreCase(key) => v }
    val recordType = get("recordType").map(RecordType.parse).getOrElse(RecordType.Example)
    val codec = get("codec").map(_.trim).filter(c => c.nonEmpty && !Set("none", "uncompressed").contains(c.toLowerCase))
    TFRecordOptions(recordType, codec, get(InferFiles).map(parseInferFiles).getOrElse(Some(1)))
  }

  /** How many files (the first, in path order) schema inference reads: `inferSchemaFiles`, a
    * number or "all"; None: all of them. */
  val InferFiles = "inferSchemaFiles"

  private def parseInferFiles(value: String): Option[Int] = value.trim.toLowerCase match {
    case "all" => None
    case n if n.nonEmpty && n.forall(_.isDigit) && n.toInt >= 1 => Some(n.toInt)
    case _ => throw new IllegalArgumentException(
      s"tfos-tfrecord: $InferFiles must be a number of files (1 or more) or 'all', got '$value'")
  }
}
