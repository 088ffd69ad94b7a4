package tfos.spark.cluster

import java.util.{Base64, UUID}
import java.util.concurrent.ConcurrentHashMap

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FSDataOutputStream, FileSystem, Path}
import org.apache.spark.SparkContext
import org.apache.spark.sql.SQLContext
import org.apache.spark.sql.classic.SparkSession
import org.apache.spark.sql.sources.{BaseRelation, DataSourceRegister, RelationProvider}
import org.apache.spark.sql.types.{MetadataBuilder, StringType, StructField, StructType}
import org.apache.spark.tfos.StatusAccess

/** Calls a client makes on the driver: `format("tfos-driver")`.
  *
  * A Spark Connect client has no JVM of its own and no SparkContext, yet the package needs a few
  * things only the driver can do: Hadoop's FileSystem with the session's configuration (manifests,
  * model directories, sweep files on HDFS or S3), what the cluster looks like, which tasks of a job
  * failed, the analysis-time check of the prediction function's arguments, and the relay that
  * carries the TF nodes' control channel to a client they cannot reach. Resolving this data source
  * is such a call: option `call` names it, option `args` holds its arguments as JSON, and the
  * answer is in the schema of the relation (its one field's metadata, key `tfos`, as JSON
  * `{"ok": true, "value": ...}` or `{"ok": false, "error": ..., "class": ...}`). Resolving happens
  * on the driver when the plan is analysed, in classic and Connect sessions alike; no task runs,
  * so a call is answered while a TF cluster holds every executor. The call names are those of
  * `tfos_jobs.driver_calls`, their one owner on the Python side.
  */
class DriverCallSource extends RelationProvider with DataSourceRegister {
  override def shortName(): String = "tfos-driver"

  override def createRelation(context: SQLContext, parameters: Map[String, String]): BaseRelation = {
    val session = context.sparkSession.asInstanceOf[SparkSession]
    val name = parameters.getOrElse("call", "")
    val args = DriverCalls.mapper.readTree(parameters.getOrElse("args", "{}"))
    val answer = try {
      Map("ok" -> true, "value" -> DriverCalls.call(session, name, args))
    } catch {
      case e: Throwable if scala.util.control.NonFatal(e) =>
        Map("ok" -> false, "class" -> e.getClass.getName, "error" -> s"${e.getClass.getName}: ${e.getMessage}")
    }
    val meta = new MetadataBuilder().putString("tfos", DriverCalls.mapper.writeValueAsString(DriverCalls.toJava(answer)))
    val fields = StructType(Seq(StructField("answer", StringType, nullable = true, meta.build())))
    new BaseRelation {
      override def sqlContext: SQLContext = context
      override def schema: StructType = fields
    }
  }
}

object DriverCalls {
  val mapper = new ObjectMapper()

  def call(session: SparkSession, name: String, args: JsonNode): Any = {
    def text(key: String): String = {
      val node = args.get(key)
      require(node != null && !node.isNull, s"call $name needs the argument $key")
      node.asText()
    }
    def long(key: String, default: Long): Long = Option(args.get(key)).filterNot(_.isNull).map(_.asLong()).getOrElse(default)
    lazy val conf = session.sessionState.newHadoopConf()
    name match {
      case "fs.qualify" => Files.qualify(conf, text("path"))
      case "fs.exists" => Files.fs(conf, text("path")).exists(new Path(text("path")))
      case "fs.status" => Files.status(conf, text("path"))
      case "fs.list" => Files.list(conf, text("path"))
      case "fs.tree" => Files.tree(conf, text("path"))
      case "fs.data_files" => Files.dataFiles(conf, text("path"))
      case "fs.mkdirs" => Files.fs(conf, text("path")).mkdirs(new Path(text("path")))
      case "fs.delete" => Files.fs(conf, text("path")).delete(new Path(text("path")), true)
      case "fs.rename" => Files.rename(conf, text("src"), text("dst"))
      case "fs.read" => Files.read(conf, text("path"), long("offset", 0), long("length", -1))
      case "fs.write" => Files.write(conf, text("path"), long("offset", 0), text("data"), args.path("last").asBoolean(true))
      case "cluster.info" => Cluster.info(session)
      case "cluster.conf" => session.sparkContext.getConf.getOption(text("key")).orNull
      case "jobs.failures" => Jobs.failures(session.sparkContext, text("tag"))
      case "jobs.tasks" => Jobs.firstStageTasks(session.sparkContext, text("tag"))
      case "udf.check" => tfos.udf.PredictionFunction.wrap(session, text("name"), text("inputs")); true
      case "udf.jvm" => tfos.udf.jvm.JvmFunction.register(session, text("name"), text("plan"), text("inputs"),
        text("counted_name"), text("value_field"), text("counts_field")); true
      case "udf.jvm.counts" => tfos.udf.jvm.JvmFunction.counts(session, text("name"))
      case "relay.open" => Relay.open(text("token"), Option(args.get("ports")).toSeq.flatMap(_.elements().asScala.map(_.asInt())))
      case "relay.exchange" => Relay.exchange(text("id"), args.get("out"), long("wait_ms", 0))
      case "relay.close" => Relay.close(text("id")); true
      case other => throw new IllegalArgumentException(s"no driver call named '$other'")
    }
  }

  /** Scala values as Jackson serialises them. */
  def toJava(value: Any): Any = value match {
    case m: Map[_, _] => m.map { case (k, v) => k.toString -> toJava(v) }.asJava
    case s: Seq[_] => s.map(toJava).asJava
    case a: Array[_] => a.toSeq.map(toJava).asJava
    case other => other
  }
}

/** Hadoop's FileSystem for any path, with the session's Hadoop configuration. */
object Files {
  private val encoder = Base64.getEncoder
  private val decoder = Base64.getDecoder

  def fs(conf: Configuration, path: String): FileSystem = new Path(path).getFileSystem(conf)

  def qualify(conf: Configuration, path: String): String = {
    val p = new Path(path)
    p.getFileSystem(conf).makeQualified(p).toString
  }

  /** (size, modified ms, directory) of a path, or null when it does not exist. */
  def status(conf: Configuration, path: String): Any = {
    val p = new Path(path)
    val fs = p.getFileSystem(conf)
    if (!fs.exists(p)) null
    else {
      val s = fs.getFileStatus(p)
      Map("size" -> s.getLen, "modified" -> s.getModificationTime, "dir" -> s.isDirectory)
    }
  }

  /** The entries directly in a directory: name, size, directory. */
  def list(conf: Configuration, path: String): Seq[Map[String, Any]] = {
    val p = new Path(path)
    p.getFileSystem(conf).listStatus(p).toSeq.map { s =>
      Map("name" -> s.getPath.getName, "size" -> s.getLen, "dir" -> s.isDirectory)
    }.sortBy(_("name").toString)
  }

  /** (path relative to the directory, size) of every file below it, checksum files excluded. */
  def tree(conf: Configuration, path: String): Seq[Seq[Any]] = {
    val p = new Path(path)
    val fs = p.getFileSystem(conf)
    if (!fs.exists(p)) return Nil
    val base = fs.makeQualified(p).toUri.getPath.stripSuffix("/")
    val files = fs.listFiles(p, true)
    val out = mutable.ArrayBuffer[Seq[Any]]()
    while (files.hasNext) {
      val s = files.next()
      if (!s.getPath.getName.endsWith(".crc")) out += Seq(s.getPath.toUri.getPath.substring(base.length + 1), s.getLen)
    }
    out.toSeq.sortBy(_.head.toString)
  }

  /** The data files Spark reads at a path, qualified, skipping hidden names as Spark does. */
  def dataFiles(conf: Configuration, path: String): Seq[String] = {
    val root = new Path(path)
    val fs = root.getFileSystem(conf)
    if (!fs.exists(root)) return Nil
    if (fs.getFileStatus(root).isFile) return Seq(fs.makeQualified(root).toString)
    val out = mutable.ArrayBuffer[String]()
    val pending = mutable.Stack(root)
    while (pending.nonEmpty) {
      for (s <- fs.listStatus(pending.pop())) {
        val name = s.getPath.getName
        val hidden = name.startsWith(".") || (name.startsWith("_") && !name.contains("=")) || name.endsWith("._COPYING_")
        if (!hidden) { if (s.isDirectory) pending.push(s.getPath) else out += s.getPath.toString }
      }
    }
    out.toSeq.sorted
  }

  def rename(conf: Configuration, src: String, dst: String): Boolean = {
    if (!fs(conf, src).rename(new Path(src), new Path(dst)))
      throw new java.io.IOException(s"could not rename '$src' to '$dst'")
    true
  }

  def read(conf: Configuration, path: String, offset: Long, length: Long): String = {
    val p = new Path(path)
    val in = p.getFileSystem(conf).open(p)
    try {
      if (offset > 0) in.seek(offset)
      val data = if (length < 0) in.readAllBytes() else in.readNBytes(length.toInt)
      encoder.encodeToString(data)
    } finally in.close()
  }

  private final case class Writer(stream: FSDataOutputStream, var next: Long, var used: Long)

  private val writers = new ConcurrentHashMap[String, Writer]()
  val WriterIdleMillis = 300000L

  /** A file written in chunks, in order: offset 0 creates it (replacing any), each later chunk
    * appends at the offset the last one ended, `last` closes it. A writer left idle is dropped. */
  def write(conf: Configuration, path: String, offset: Long, data: String, last: Boolean): Long = {
    val now = System.currentTimeMillis()
    writers.entrySet().asScala.filter(e => now - e.getValue.used > WriterIdleMillis).foreach { e =>
      writers.remove(e.getKey)
      scala.util.Try(e.getValue.stream.close())
    }
    val bytes = decoder.decode(data)
    val writer = if (offset == 0) {
      Option(writers.remove(path)).foreach(w => scala.util.Try(w.stream.close()))
      val p = new Path(path)
      Writer(p.getFileSystem(conf).create(p, true), 0L, now)
    } else {
      val w = writers.remove(path)
      if (w == null || w.next != offset)
        throw new java.io.IOException(s"'$path': a chunk at offset $offset arrived, but the file was not being written there")
      w
    }
    try {
      writer.stream.write(bytes)
      writer.next += bytes.length
      writer.used = now
      if (last) writer.stream.close() else writers.put(path, writer)
    } catch {
      case e: Throwable =>
        scala.util.Try(writer.stream.close())
        throw e
    }
    writer.next
  }
}

object Cluster {
  def info(session: SparkSession): Map[String, Any] = {
    val sc = session.sparkContext
    Map(
      "master" -> sc.master,
      "app_id" -> sc.applicationId,
      "executors" -> (sc.getExecutorMemoryStatus.size - 1),
      "default_parallelism" -> sc.defaultParallelism,
      "driver_host" -> sc.getConf.get("spark.driver.host", ""),
      "spark_version" -> sc.version)
  }
}

/** What Spark recorded of the jobs that carry a tag (a client's job tag is part of the tags
  * Spark gives the job, in classic and Connect sessions alike). */
object Jobs {
  private def tagged(sc: SparkContext, tag: String) =
    StatusAccess.store(sc).jobsList(null).filter(_.jobTags.exists(_.contains(tag)))

  /** Failed task attempts of those jobs, the error of each failed partition, and each failed
    * attempt as [partition, attempt number, error]. */
  def failures(sc: SparkContext, tag: String): Map[String, Any] = {
    val errors = mutable.Map[String, String]()
    val attempts = mutable.ArrayBuffer[Seq[Any]]()
    var failed = 0
    for (job <- tagged(sc, tag); stage <- job.stageIds) {
      for (info <- StatusAccess.store(sc).stageList(null) if info.stageId == stage) {
        failed += info.numFailedTasks
        if (info.numFailedTasks > 0) {
          for (task <- StatusAccess.store(sc).taskList(stage, info.attemptId, 10000); message <- task.errorMessage) {
            errors.getOrElseUpdate(task.index.toString, message)
            attempts += Seq(task.index, task.attempt, message)
          }
        }
      }
    }
    Map("failed_tasks" -> failed, "errors" -> errors.toMap, "attempts" -> attempts.toSeq)
  }

  /** The tasks of the first stage of those jobs (0 when there is none), once the jobs that
    * ended before the call are in the status store. */
  def firstStageTasks(sc: SparkContext, tag: String): Int = {
    StatusAccess.settle(sc)
    val stages = tagged(sc, tag).flatMap(_.stageIds).sorted
    stages.headOption.flatMap(id => StatusAccess.store(sc).stageList(null).find(_.stageId == id)).map(_.numTasks).getOrElse(0)
  }
}

private[cluster] object Ids {
  def next(): String = UUID.randomUUID().toString
}
