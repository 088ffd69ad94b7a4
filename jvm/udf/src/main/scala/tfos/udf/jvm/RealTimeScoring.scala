package tfos.udf.jvm

import java.util.concurrent.{LinkedBlockingQueue, TimeUnit}

import scala.collection.mutable

import org.apache.spark.TaskContext
import org.apache.spark.sql.{Dataset, Row}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.catalyst.encoders.{ExpressionEncoder, RowEncoder}
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.types.StructType
import org.apache.spark.tfos.TaskThreads

/** The prediction function on a stream under Spark's real-time trigger, which admits only the operators of its
  * allow-list (`RealTimeModeAllowlist`): not a batch-evaluation operator of the package's, not a Python UDF. So the
  * rows are scored inside a typed `mapPartitions` (MapPartitionsExec, admitted): a thread reads the partition's rows
  * as they arrive, and the task scores whatever has arrived, up to `flushRows` rows, waiting at most `flushMillis`
  * after the first for more. Each row goes out as soon as its batch is scored. */
object RealTimeScoring {
  /** `df` with the prediction as `column`; a row whose `skip` column is set (a reason not to score it) gets none.
    * One pass over the source: real-time mode refuses a union of a source with itself. */
  def score(df: Dataset[Row], planJson: String, column: String, flushRows: Int, flushMillis: Long,
            skip: String): Dataset[Row] = {
    val plan = ScoringPlan.parse(planJson)
    JvmFunction.shipTensorFlow(df.sparkSession.asInstanceOf[org.apache.spark.sql.classic.SparkSession])
    val schema = df.schema
    val missing = plan.inputs.map(_.name).filterNot(schema.fieldNames.contains)
    require(missing.isEmpty, s"the stream lacks the model's input column(s) ${missing.mkString(", ")}; " +
      s"it has ${schema.fieldNames.mkString(", ")}")
    val positions = plan.inputs.map(i => schema.fieldIndex(i.name)).toArray
    val skipAt = if (skip.isEmpty) -1 else schema.fieldIndex(skip)
    val types = plan.inputs.map(i => schema(i.name).dataType)
    val out = StructType(schema.fields :+ org.apache.spark.sql.types.StructField(column, plan.resultType))
    val rows = math.max(1, flushRows)
    df.mapPartitions((input: Iterator[Row]) => new Scored(input, plan, schema, positions, types, rows, flushMillis, skipAt))(
      ExpressionEncoder(RowEncoder.encoderFor(out)))
  }

  private object End

  private final class Failed(val error: Throwable)

  private final class Scored(input: Iterator[Row], plan: ScoringPlan, schema: StructType, positions: Array[Int],
                             types: Seq[org.apache.spark.sql.types.DataType], flushRows: Int, flushMillis: Long,
                             skipAt: Int)
    extends Iterator[Row] {
    private val queue = new LinkedBlockingQueue[AnyRef](math.max(1024, flushRows * 4))
    private val context = TaskContext.get()
    private val scoring = new Scoring(plan, types)
    private val toInternal = ExpressionEncoder(RowEncoder.encoderFor(schema)).createSerializer()
    private val toScala = CatalystTypeConverters.createToScalaConverter(plan.resultType)
    private var ready: Iterator[Row] = Iterator.empty
    private var done = false
    private val reader = new Thread(() => {
      if (context != null) TaskThreads.inherit(context)
      try {
        while (input.hasNext) queue.put(input.next())
        queue.put(End)
      } catch {
        case _: InterruptedException => ()
        case e: Throwable => // handed to the task, unless the task is ending (interrupted) too
          try queue.put(new Failed(e)) catch { case _: InterruptedException => () }
      } finally TaskThreads.forget()
    }, "tfos-real-time-reader")
    reader.setDaemon(true)
    reader.start()
    Option(context).foreach(_.addTaskCompletionListener[Unit] { _ => reader.interrupt(); scoring.close() })

    override def hasNext: Boolean = {
      while (!ready.hasNext && !done) ready = batch
      ready.hasNext
    }

    override def next(): Row = if (hasNext) ready.next() else throw new NoSuchElementException

    private def batch: Iterator[Row] = {
      val rows = mutable.ArrayBuffer[Row]()
      var item = queue.take()
      val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(flushMillis)
      while (item != null && !done && rows.size < flushRows) {
        item match {
          case End => done = true
          case f: Failed => throw f.error
          case row: Row => rows += row
        }
        if (!done && rows.size < flushRows) {
          val left = deadline - System.nanoTime()
          item = if (left > 0) queue.poll(left, TimeUnit.NANOSECONDS) else queue.poll()
        }
      }
      if (rows.isEmpty) return Iterator.empty
      val scoredAt = rows.indices.filter(i => skipAt < 0 || rows(i).isNullAt(skipAt))
      val args = scoredAt.map(rows(_)).map { r =>
        val internal = toInternal(r).copy()
        new GenericInternalRow(positions.zip(types).map { case (p, t) => if (internal.isNullAt(p)) null else internal.get(p, t) })
          : InternalRow
      }.toArray
      val scored = if (args.isEmpty) Array.empty[Any] else scoring.score(args, mutable.Map[String, Long]())
      val results = new Array[Any](rows.size)
      scoredAt.zipWithIndex.foreach { case (i, k) => results(i) = toScala(scored(k)) }
      rows.indices.iterator.map(i => Row.fromSeq(rows(i).toSeq :+ results(i)))
    }
  }
}
