package tfos.spark.cluster

import java.nio.file.{Files, Paths, Path => JPath}

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.commons.io.FileUtils
import org.apache.hadoop.fs.{FSDataInputStream, Path}
import org.apache.spark.{Partition, SparkContext, TaskContext}
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{Row, SQLContext}
import org.apache.spark.sql.sources.{BaseRelation, DataSourceRegister, RelationProvider, TableScan}
import org.apache.spark.tfos.StatusAccess
import org.apache.spark.sql.types.{BinaryType, IntegerType, LongType, StringType, StructField, StructType}

import tfos.spark.tfrecord.SerializableConf

/** The files each TF node trains from, as rows: `format("tfos-node-inputs")`.
  *
  * Option `plan`: a JSON list with one entry per node, the paths of that node's files (any
  * filesystem the session's Hadoop configuration reaches). Partition i is node i: its task reads
  * node i's files with Hadoop's FileSystem, on its own executor, and hands them on in one of two
  * ways, as rows (node, file, offset, size, data, copy):
  *  - option `spool` = true: each file is copied whole to one of the executor's local directories
  *    (a stream copy: the heap holds a buffer, never the file), one row per file naming the copy
  *    in `copy`, with no data. The copies belong to the task: whatever the consumer (a process of
  *    the same executor) has not moved away is deleted when the task ends.
  *  - otherwise (chunks): one row per `chunk_bytes` (default 4 MiB) of each file, in `data`, for a
  *    consumer that cannot see the executor's disk. No task ever holds more than a chunk of a file;
  *    an empty file is one row with no data.
  * The rows are in file order, each file's chunks in offset order.
  */
class NodeInputsSource extends RelationProvider with DataSourceRegister {
  override def shortName(): String = NodeInputs.ShortName

  override def createRelation(context: SQLContext, parameters: Map[String, String]): BaseRelation = {
    val plan = parameters.getOrElse("plan", throw new IllegalArgumentException("tfos-node-inputs needs the option plan"))
    val chunk = parameters.get("chunk_bytes").map(_.toInt).getOrElse(NodeInputs.DefaultChunk)
    require(chunk > 0, s"chunk_bytes must be positive, got $chunk")
    val spool = parameters.get("spool").exists(_.trim.toBoolean)
    new NodeInputsRelation(context, NodeInputs.parsePlan(plan), chunk, spool)
  }
}

object NodeInputs {
  val ShortName = "tfos-node-inputs"
  val DefaultChunk: Int = 4 << 20

  val Schema: StructType = StructType(Seq(
    StructField("node", IntegerType, nullable = false),
    StructField("file", StringType, nullable = false),
    StructField("offset", LongType, nullable = false),
    StructField("size", LongType, nullable = false),
    StructField("data", BinaryType, nullable = false),
    StructField("copy", StringType, nullable = true)))

  def parsePlan(json: String): Seq[Seq[String]] = {
    val root = new ObjectMapper().readTree(json)
    require(root.isArray, "plan must be a JSON list (one list of paths per node)")
    root.elements().asScala.map { node =>
      require(node.isArray, "each node's entry in plan must be a list of paths")
      node.elements().asScala.map(_.asText()).toSeq
    }.toSeq
  }
}

final class NodeInputsRelation(context: SQLContext, plan: Seq[Seq[String]], chunk: Int, spool: Boolean)
  extends BaseRelation with TableScan {
  override def sqlContext: SQLContext = context

  override def schema: StructType = NodeInputs.Schema

  override def buildScan(): RDD[Row] = {
    val session = context.sparkSession.asInstanceOf[org.apache.spark.sql.classic.SparkSession]
    val conf = session.sparkContext.broadcast(new SerializableConf(session.sessionState.newHadoopConf()))
    new NodeInputsRDD(session.sparkContext, plan, chunk, spool, conf)
  }
}

final class NodePartition(val index: Int, val paths: Seq[String]) extends Partition

final class NodeInputsRDD(sc: SparkContext, plan: Seq[Seq[String]], chunk: Int, spool: Boolean, conf: Broadcast[SerializableConf])
  extends RDD[Row](sc, Nil) {

  override protected def getPartitions: Array[Partition] =
    plan.zipWithIndex.map { case (paths, i) => new NodePartition(i, paths): Partition }.toArray

  override def compute(split: Partition, context: TaskContext): Iterator[Row] = {
    val part = split.asInstanceOf[NodePartition]
    if (spool) {
      val dir = Files.createTempDirectory(Paths.get(StatusAccess.localDir()), "tfos-node-inputs-")
      context.addTaskCompletionListener[Unit](_ => FileUtils.deleteQuietly(dir.toFile))
      part.paths.iterator.zipWithIndex.map { case (path, i) => spooled(part.index, path, dir.resolve(i.toString)) }
    } else part.paths.iterator.flatMap(path => chunks(part.index, path, context))
  }

  /** One file copied whole to this executor's local disk, as one row naming the local copy. */
  private def spooled(node: Int, path: String, target: JPath): Row = {
    val hadoopPath = new Path(path)
    val in = hadoopPath.getFileSystem(conf.value.value).open(hadoopPath)
    val size = try Files.copy(in, target) finally in.close()
    Row(node, path, 0L, size, Array.emptyByteArray, target.toString)
  }

  /** One file's rows, read as they are consumed; the stream is closed at its end or the task's. */
  private def chunks(node: Int, path: String, context: TaskContext): Iterator[Row] = {
    val hadoopPath = new Path(path)
    val fs = hadoopPath.getFileSystem(conf.value.value)
    val fileSize = fs.getFileStatus(hadoopPath).getLen
    if (fileSize == 0) return Iterator.single(Row(node, path, 0L, fileSize, Array.emptyByteArray, null))
    var in: FSDataInputStream = null
    var offset = 0L
    context.addTaskCompletionListener[Unit](_ => if (in != null) in.close())
    new Iterator[Row] {
      override def hasNext: Boolean = offset < fileSize

      override def next(): Row = {
        if (in == null) in = fs.open(hadoopPath)
        val length = math.min(chunk.toLong, fileSize - offset).toInt
        val data = new Array[Byte](length)
        in.readFully(data)
        val row = Row(node, path, offset, fileSize, data, null)
        offset += length
        if (offset >= fileSize) { in.close(); in = null }
        row
      }
    }
  }
}
