package tfos.spark.cluster

import java.io.File
import java.util.concurrent.ConcurrentHashMap
import java.util.{Map => JMap}

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.tfos.SqlWarmUp
import org.apache.spark.unsafe.types.UTF8String

/** `spark.plugins=tfos.spark.cluster.WarmUpPlugin`: each executor, as it starts, does once in the background what
  * the first task of a Python function over a DataFrame does first: it loads the classes of such a task, generates
  * and compiles a projection, makes an Arrow round trip and opens a file through Hadoop's FileSystem. The first TF
  * node or prediction task the executor runs then no longer waits for them (docs/tuning.md, item 14d). Nothing
  * depends on it: a failure is logged and ignored. Each executor tells the driver how it went (`WarmUpPlugin.report`). */
class WarmUpPlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = new DriverPlugin {
    override def receive(message: Any): AnyRef = {
      message match {
        case done: WarmedUp => WarmUpPlugin.done.put(done.executor, done.outcome)
        case _ =>
      }
      null
    }
  }

  override def executorPlugin(): ExecutorPlugin = new ExecutorPlugin {
    override def init(ctx: PluginContext, extraConf: JMap[String, String]): Unit = {
      val thread = new Thread(() => {
        val outcome = WarmUpPlugin.run()
        try ctx.send(WarmedUp(ctx.executorID(), outcome)) catch { case _: Exception => () }
      }, "tfos-warm-up")
      thread.setDaemon(true)
      thread.start()
    }
  }
}

/** An executor's warm-up: its seconds ("0.62"), or why it failed ("failed: ..."). */
final case class WarmedUp(executor: String, outcome: String)

object WarmUpPlugin extends Logging {
  private val done = new ConcurrentHashMap[String, String]()

  /** Classes a Python function's first task deserializes and runs (with their supertypes and what they link). */
  private val TaskClasses = Seq(
    "org.apache.spark.scheduler.ResultTask", "org.apache.spark.broadcast.TorrentBroadcast",
    "org.apache.spark.rdd.MapPartitionsRDD", "org.apache.spark.sql.execution.WholeStageCodegenExec",
    "org.apache.spark.sql.execution.RowDataSourceScanExec", "org.apache.spark.sql.execution.ProjectExec",
    "org.apache.spark.sql.execution.python.MapInBatchExec", "org.apache.spark.sql.execution.python.ArrowPythonRunner",
    "org.apache.spark.sql.execution.datasources.LogicalRelation", "org.apache.spark.sql.catalyst.expressions.Cast")

  /** On the driver: executor id -> how its warm-up went, for the executors that reported so far. */
  def report(): java.util.Map[String, String] = new java.util.TreeMap[String, String](done)

  def run(): String = {
    val started = System.nanoTime()
    try {
      val loader = Option(Thread.currentThread().getContextClassLoader).getOrElse(getClass.getClassLoader)
      TaskClasses.foreach(name => try Class.forName(name, true, loader) catch { case _: Throwable => () })
      SqlWarmUp.run(NodeInputs.Schema, InternalRow(0, UTF8String.fromString(""), 0L, 0L, Array.emptyByteArray, null))
      val file = File.createTempFile("tfos-warm-up", ".bin")
      try {
        val path = new Path(file.toURI)
        path.getFileSystem(new Configuration()).open(path).close()
      } finally file.delete()
      NodeInputs.parsePlan("[[]]")
      val seconds = "%.2f".formatLocal(java.util.Locale.ROOT, (System.nanoTime() - started) / 1e9)
      logInfo(s"executor warm-up done in $seconds s")
      seconds
    } catch {
      case e: Throwable =>
        logWarning(s"executor warm-up failed (nothing depends on it): $e")
        s"failed: $e"
    }
  }
}
