package tfos.spark.tfrecord

import scala.collection.mutable

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.types._

/** What inference learned about one feature; `file` is where its kind was first seen, for errors. */
final case class FeatureStat(kind: Int, multi: Boolean, list: Boolean, file: String)

/**
 * Infers a schema by scanning every record of the files it is given (the source's sample), on
 * the executors (one Spark job).
 * Int64List -> long, FloatList -> float, BytesList -> string; array<...> if any record holds
 * a count other than one; SequenceExample feature lists -> array<array<...>>.
 */
object SchemaInference {
  def infer(session: SparkSession, conf: SerializableConf, paths: Seq[String], options: TFRecordOptions): StructType = {
    val sequence = options.sequence
    val sc = session.sparkContext
    val slices = math.max(1, math.min(paths.size, sc.defaultParallelism))
    val perSlice = sc.parallelize(paths, slices)
      .mapPartitions(files => Iterator(scanFiles(files, conf, sequence)))
      .collect()
    val merged = mutable.LinkedHashMap[String, FeatureStat]() // keeps first-seen column order
    perSlice.foreach(_.foreach { case (key, stat) => merge(merged, key, stat) })
    StructType(merged.toSeq.map { case (key, s) =>
      val elem = FeatureSchema.inferredType(s.kind)
      val dataType = if (s.list) ArrayType(ArrayType(elem)) else if (s.multi) ArrayType(elem) else elem
      StructField(key, dataType, nullable = true)
    })
  }

  private def scanFiles(files: Iterator[String], conf: SerializableConf, sequence: Boolean): Array[(String, FeatureStat)] = {
    val stats = mutable.LinkedHashMap[String, FeatureStat]()
    files.foreach { file =>
      val walker = new InferenceWalker(sequence, file, stats)
      TFRecordScan.foreachRecord(new Path(file), conf.value)(r => walker.walk(r.data, r.length))
    }
    stats.toArray
  }

  def merge(stats: mutable.Map[String, FeatureStat], key: String, s: FeatureStat): Unit =
    stats.get(key) match {
      case None => stats(key) = s
      case Some(old) =>
        if (old.list != s.list) throw new IllegalArgumentException(
          s"tfos-tfrecord: cannot infer schema: feature '$key' is a feature list in " +
            s"${if (old.list) old.file else s.file} but a context feature in ${if (old.list) s.file else old.file}")
        if (old.kind != 0 && s.kind != 0 && old.kind != s.kind) throw new IllegalArgumentException(
          s"tfos-tfrecord: cannot infer schema: feature '$key' is a ${FeatureSchema.kindName(old.kind)} in " +
            s"${old.file} but a ${FeatureSchema.kindName(s.kind)} in ${s.file}; pass an explicit schema")
        val known = if (old.kind != 0) old else s
        stats(key) = FeatureStat(known.kind, old.multi || s.multi, old.list, known.file)
    }
}

/** Collects kind and value counts of every feature it walks. */
final class InferenceWalker(sequence: Boolean, file: String, stats: mutable.Map[String, FeatureStat])
  extends FeatureWalker(sequence) {
  private val values = new FeatureValues

  override protected def onFeature(key: String, feature: ProtoReader): Unit = {
    values.parse(feature)
    SchemaInference.merge(stats, key, FeatureStat(values.kind, values.count != 1, list = false, file))
  }

  override protected def onFeatureList(key: String, list: ProtoReader): Unit = {
    SchemaInference.merge(stats, key, FeatureStat(0, multi = false, list = true, file))
    while (list.hasMore) {
      val tag = list.readTag()
      if (tag == ((1 << 3) | 2)) {
        values.parse(list.sub())
        SchemaInference.merge(stats, key, FeatureStat(values.kind, multi = false, list = true, file))
      } else list.skip(tag & 7)
    }
  }
}
