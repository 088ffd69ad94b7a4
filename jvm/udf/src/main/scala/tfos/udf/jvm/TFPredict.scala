package tfos.udf.jvm

import scala.collection.mutable

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, AttributeReference, AttributeSet, Expression,
  GenericInternalRow, JoinedRow, NamedExpression, UnsafeProjection, Unevaluable}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project, UnaryNode}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.types.DataType
import org.apache.spark.unsafe.types.UTF8String
import org.apache.spark.util.AccumulatorV2

/** The prediction function's call in a query, scored in the executor JVM. It is never evaluated row by
  * row: `ExtractTFPredict` moves it into a `TFBatchEval` below the operator that uses it, planned as
  * `TFBatchEvalExec`, which scores `plan.batchSize` rows per TensorFlow call (as Spark moves a Python
  * UDF into a BatchEvalPython). Unevaluable also keeps the optimizer from running it on the driver. */
case class TFPredict(name: String, plan: ScoringPlan, children: Seq[Expression], counted: Boolean,
                     counter: Option[CountsAccumulator], countedFields: (String, String))
  extends Expression with Unevaluable {
  override def dataType: DataType =
    if (counted) plan.countedType(countedFields._1, countedFields._2) else plan.resultType
  override def nullable: Boolean = true
  override lazy val deterministic: Boolean = true
  override def prettyName: String = name
  override def toString: String = s"$name(${children.mkString(", ")})"
  override protected def withNewChildrenInternal(newChildren: IndexedSeq[Expression]): TFPredict =
    copy(children = newChildren)
}

/** The function's rows counted over every query that used it (rows scored, nulls filled, unseen and cut
  * values per feature), kept on the driver like any accumulator. */
class CountsAccumulator extends AccumulatorV2[(String, Long), java.util.Map[String, java.lang.Long]] {
  private val counts = new java.util.HashMap[String, java.lang.Long]()
  override def isZero: Boolean = counts.isEmpty
  override def copy(): CountsAccumulator = { val c = new CountsAccumulator; c.merge(this); c }
  override def reset(): Unit = counts.clear()
  override def add(v: (String, Long)): Unit = counts.merge(v._1, v._2, (a, b) => a + b)
  override def merge(other: AccumulatorV2[(String, Long), java.util.Map[String, java.lang.Long]]): Unit =
    other.value.forEach((k, v) => counts.merge(k, v, (a, b) => a + b))
  override def value: java.util.Map[String, java.lang.Long] = counts
}

/** The columns of `child` the plan above needs (`passThrough`), and the functions' results as `resultAttrs`. */
case class TFBatchEval(udfs: Seq[TFPredict], resultAttrs: Seq[Attribute], passThrough: Seq[Attribute],
                       child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = passThrough ++ resultAttrs
  override def producedAttributes: AttributeSet = AttributeSet(resultAttrs)
  override protected def withNewChildInternal(newChild: LogicalPlan): TFBatchEval = copy(child = newChild)
}

/** Every operator with one input whose expressions call the function on its input's columns gets a
  * `TFBatchEval` below it, and refers to the results by attribute (a Project, a Filter, an Aggregate
  * of the predictions, a Sort, a Window...). */
object ExtractTFPredict extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan = plan.transformUp {
    case p: LogicalPlan if p.children.size == 1 && !p.isInstanceOf[TFBatchEval] =>
      val child = p.children.head
      val udfs = p.expressions.flatMap(_.collect {
        case u: TFPredict if u.children.forall(_.find(_.isInstanceOf[TFPredict]).isEmpty) &&
          u.references.subsetOf(child.outputSet) => u
      }).distinct
      if (udfs.isEmpty) p
      else {
        val attrs = udfs.map(u => AttributeReference(s"${u.name}_result", u.dataType, nullable = true)())
        val bound = udfs.zip(attrs).toMap[Expression, Attribute]
        val uses = p.transformExpressions { case u: TFPredict if bound.contains(u) => bound(u) }
        // only the input columns used above go on: an aggregate of the predictions keeps no input row
        val needed = uses.references ++ AttributeSet(p.output)
        val eval = TFBatchEval(udfs, attrs, child.output.filter(needed.contains), child)
        val rewritten = uses.withNewChildren(Seq(eval))
        if (rewritten.output.map(_.exprId) == p.output.map(_.exprId)) rewritten else Project(p.output, rewritten)
      }
  }
}

object TFBatchEvalStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case TFBatchEval(udfs, attrs, passThrough, child) => TFBatchEvalExec(udfs, attrs, passThrough, planLater(child)) :: Nil
    case _ => Nil
  }
}

/** Scores its input in batches of `plan.batchSize` rows, each function once per batch, and appends the
  * results. The models load once per executor (`SavedModels`) and are shared by its task threads. */
case class TFBatchEvalExec(udfs: Seq[TFPredict], resultAttrs: Seq[Attribute], passThrough: Seq[Attribute],
                           child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = passThrough ++ resultAttrs
  override def producedAttributes: AttributeSet = AttributeSet(resultAttrs)
  override lazy val metrics: Map[String, SQLMetric] = Map(
    "numOutputRows" -> SQLMetrics.createMetric(sparkContext, "number of output rows"),
    "batches" -> SQLMetrics.createMetric(sparkContext, "number of TensorFlow calls"),
    "scoreTime" -> SQLMetrics.createNanoTimingMetric(sparkContext, "time scoring in TensorFlow"))

  override protected def withNewChildInternal(newChild: SparkPlan): TFBatchEvalExec = copy(child = newChild)

  override protected def doExecute(): RDD[InternalRow] = {
    val functions = udfs
    val inputs = child.output
    val kept = passThrough
    val results = resultAttrs
    val rowsOut = longMetric("numOutputRows")
    val calls = longMetric("batches")
    val scoreTime = longMetric("scoreTime")
    child.execute().mapPartitions { iter =>
      val batches = new TFBatchEvalExec.Batches(functions, inputs, kept, results, iter)
      Option(TaskContext.get()).foreach(_.addTaskCompletionListener[Unit](_ => batches.close()))
      batches.flatMap { batch =>
        val started = System.nanoTime()
        val out = batches.score(batch)
        scoreTime += System.nanoTime() - started
        calls += functions.size
        rowsOut += batch.size
        out
      }
    }
  }
}

object TFBatchEvalExec {
  /** A batch of `size` rows: its held rows (the input rows, or the columns kept above) and, per function, its
    * arguments' rows (the held rows themselves when the arguments are read where they are); or, when nothing is held,
    * per function the batch its model takes, filled as the rows came (`Scoring#Coded`). */
  final case class Batch(size: Int, held: Array[InternalRow], args: Array[Array[InternalRow]], coded: Array[Scoring#Coded])

  /** A partition's rows in batches of the functions' batch size, scored. When every argument is one of the input's
    * columns (as a struct of the columns becomes once the optimizer has taken it apart), each input row is held as it
    * is and the models read their inputs where they are; otherwise each function's arguments are projected. Rows are
    * copied as they come (an operator's iterator may hand out one row object, refilled each time), unless nothing of
    * them is held: then each row is read into its batch as it comes (`streamed`), and the time scoring
    * (`scoreTime`) leaves that reading out. */
  final class Batches(functions: Seq[TFPredict], inputs: Seq[Attribute], kept: Seq[Attribute],
                      results: Seq[Attribute], iter: Iterator[InternalRow]) extends Iterator[Batch] {
    private val batchSize = math.max(1, functions.map(_.plan.batchSize).min)
    private def ordinal(e: Expression): Int = e match {
      case a: Attribute => inputs.indexWhere(_.exprId == a.exprId)
      case _ => -1
    }
    private val direct: Option[Seq[Array[Int]]] =
      Some(functions.map(_.children.map(ordinal).toArray)).filter(_.forall(_.forall(_ >= 0)))
    private val arguments = if (direct.isEmpty) functions.map(u => UnsafeProjection.create(u.children, inputs)).toArray
      else Array.empty[UnsafeProjection]
    private val keep = if (direct.isEmpty) Some(UnsafeProjection.create(kept, inputs)) else None
    private val scorings = functions.indices.map { k =>
      val types = functions(k).children.map(_.dataType)
      direct.fold(new Scoring(functions(k).plan, types))(ordinals => new Scoring(functions(k).plan, types, ordinals(k)))
    }
    // nothing to hold when no input column goes on and every model takes codes: each row read as it comes, not copied
    private val streamed = direct.isDefined && kept.isEmpty && scorings.forall(_.coded)
    // the output row: the held row (an input row, or the kept columns; none when streamed) joined with the results
    private val project = UnsafeProjection.create(kept ++ results,
      (if (direct.isEmpty || streamed) kept else inputs) ++ results)

    def close(): Unit = scorings.foreach(_.close())

    override def hasNext: Boolean = iter.hasNext

    override def next(): Batch = {
      if (streamed) {
        val coded: Array[Scoring#Coded] = scorings.map(s => new s.Coded(batchSize): Scoring#Coded).toArray
        var n = 0
        while (n < batchSize && iter.hasNext) {
          val row = iter.next()
          var f = 0
          while (f < coded.length) { coded(f).add(row); f += 1 }
          n += 1
        }
        return Batch(n, null, null, coded)
      }
      val held = new Array[InternalRow](batchSize)
      val projected = if (direct.isEmpty) Array.fill(functions.size)(new Array[InternalRow](batchSize)) else Array.empty[Array[InternalRow]]
      var n = 0
      while (n < batchSize && iter.hasNext) {
        val row = iter.next()
        keep match {
          case None => held(n) = row.copy()
          case Some(k) =>
            held(n) = k(row).copy()
            var f = 0
            while (f < arguments.length) { projected(f)(n) = arguments(f)(row).copy(); f += 1 }
        }
        n += 1
      }
      def trimmed(a: Array[InternalRow]) = if (n == batchSize) a else java.util.Arrays.copyOf(a, n)
      val rows = trimmed(held)
      Batch(n, rows, if (direct.isEmpty) projected.map(trimmed) else Array.fill(functions.size)(rows), null)
    }

    /** The held rows with each function's result appended, as the operator's output rows. */
    def score(batch: Batch): Iterator[InternalRow] = {
      val scored = functions.indices.map { k =>
        val counts = mutable.LinkedHashMap[String, Long]()
        val out = if (batch.coded != null) scorings(k).score(batch.coded(k), counts)
          else scorings(k).score(batch.args(k), counts)
        functions(k).counter.foreach(acc => counts.foreach(acc.add))
        if (functions(k).counted) withCounts(out, counts) else out
      }.toArray
      val joined = new JoinedRow
      val held = batch.held
      (0 until batch.size).iterator.map { i =>
        val values = new Array[Any](scored.length)
        var k = 0
        while (k < scored.length) { values(k) = scored(k)(i); k += 1 }
        project(joined(if (held == null) InternalRow.empty else held(i), new GenericInternalRow(values)))
      }
    }
  }

  /** Each result with its batch's counters: on the first row, an empty map on the others (as the Python UDF). */
  def withCounts(scored: Array[Any], counts: mutable.Map[String, Long]): Array[Any] = {
    val first = ArrayBasedMapData(counts.keys.map(UTF8String.fromString).toArray, counts.values.toArray)
    val empty = ArrayBasedMapData(Array.empty[Any], Array.empty[Any])
    scored.indices.map(i => new GenericInternalRow(Array[Any](scored(i), if (i == 0) first else empty)): Any).toArray
  }
}
