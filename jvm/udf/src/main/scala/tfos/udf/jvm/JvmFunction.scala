package tfos.udf.jvm

import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.expressions.{Expression, GetStructField}
import org.apache.spark.sql.classic.SparkSession
import org.apache.spark.sql.types.StructType
import tfos.udf.PredictionFunction

/** The prediction function scored in the executor JVM, registered in a session's function registry under
  * the Python UDF's name and arguments (the features in spec order, or one struct of them), checked at
  * analysis as the Python UDF is (`PredictionFunction`). Also registered: `countedName`, the same
  * function returning each batch's counters beside its result (what `tfos predict` observes). */
object JvmFunction {
  // per session (weakly held) and function name
  private val counters = new java.util.WeakHashMap[SparkSession, ConcurrentHashMap[String, CountsAccumulator]]()

  private def countersOf(session: SparkSession): ConcurrentHashMap[String, CountsAccumulator] = counters.synchronized {
    counters.computeIfAbsent(session, _ => new ConcurrentHashMap[String, CountsAccumulator]())
  }

  def register(session: SparkSession, name: String, planJson: String, inputsJson: String, countedName: String,
               valueField: String, countsField: String): Unit = {
    val plan = ScoringPlan.parse(planJson).copy(session = org.apache.spark.tfos.SessionFiles.current())
    val inputs = PredictionFunction.parse(inputsJson)
    require(inputs.map(_.name) == plan.inputs.map(_.name),
      s"$name: the inputs checked (${inputs.map(_.name).mkString(", ")}) are not the model's (${plan.inputs.map(_.name).mkString(", ")})")
    shipTensorFlow(session)
    val counter = new CountsAccumulator
    session.sparkContext.register(counter, s"tfos.counts.$name")
    countersOf(session).put(name, counter)
    installPlanning(session)
    val registry = session.sessionState.functionRegistry
    def builder(function: String, counted: Boolean) = (args: Seq[Expression]) => {
      PredictionFunction.checkArguments(function, inputs, args)
      TFPredict(function, plan, positional(inputs.map(_.name), args), counted,
        if (counted) None else Some(counter), (valueField, countsField))
    }
    registry.createOrReplaceTempFunction(name, builder(name, counted = false), "scala_udf")
    registry.createOrReplaceTempFunction(countedName, builder(countedName, counted = true), "scala_udf")
  }

  /** TensorFlow Java's jars (`tfjava/` beside the package's jar) on the executors: added to the application
    * once, and fetched by each executor at its next task. In local mode the executors are the driver's JVM,
    * whose class path is fixed at start: the session must have started with them (`spark.jars`). */
  def shipTensorFlow(session: SparkSession): Unit = {
    val sc = session.sparkContext
    val local = sc.master.startsWith("local[") || sc.master == "local"
    if (local) {
      try Class.forName("org.tensorflow.SavedModelBundle", false, getClass.getClassLoader)
      catch {
        case _: ClassNotFoundException => throw new IllegalStateException(
          "TensorFlow Java is not on this local session's class path: start the session with the jars of " +
            s"${tensorFlowJars.headOption.map(_.getParent).getOrElse("tfos_jobs/jars/tfjava")} in spark.jars")
      }
    } else {
      val jars = tensorFlowJars
      if (jars.isEmpty) throw new IllegalStateException(s"no TensorFlow Java jars in $tensorFlowDir (make setup fetches them)")
      val added = sc.listJars().map(j => j.substring(j.lastIndexOf('/') + 1)).toSet
      jars.filterNot(j => added.contains(j.getName)).foreach(j => sc.addJar(j.getAbsolutePath))
    }
  }

  private def tensorFlowDir: java.io.File = {
    val ours = new java.io.File(getClass.getProtectionDomain.getCodeSource.getLocation.toURI)
    new java.io.File(ours.getParentFile, "tfjava")
  }

  private def tensorFlowJars: Seq[java.io.File] =
    Option(tensorFlowDir.listFiles()).toSeq.flatten.filter(_.getName.endsWith(".jar")).sortBy(_.getName)

  /** The counters of every query that used `name` in this session so far. */
  def counts(session: SparkSession, name: String): java.util.Map[String, java.lang.Long] =
    Option(countersOf(session).get(name)).map(c => new java.util.HashMap(c.value): java.util.Map[String, java.lang.Long])
      .getOrElse(throw new IllegalArgumentException(s"no function '$name' scoring in the JVM is registered in this session"))

  /** The rule and strategy that plan the function's batches, once per session (a streaming query's copy
    * of the session keeps them). */
  def installPlanning(session: SparkSession): Unit = session.synchronized {
    val methods = session.experimental
    if (!methods.extraOptimizations.contains(ExtractTFPredict)) methods.extraOptimizations :+= ExtractTFPredict
    if (!methods.extraStrategies.contains(TFBatchEvalStrategy)) methods.extraStrategies :+= TFBatchEvalStrategy
  }

  /** The arguments one per input: a struct of the features is taken apart by field name. */
  private def positional(names: Seq[String], args: Seq[Expression]): Seq[Expression] = args match {
    case Seq(struct) if names.size != args.size || (struct.dataType.isInstanceOf[StructType] &&
        !PredictionFunction.acceptsAsIs(struct.dataType, names.size)) =>
      val fields = struct.dataType.asInstanceOf[StructType].fields.map(_.name).toSeq
      names.map { n =>
        val at = Some(fields.indexOf(n)).filter(_ >= 0).getOrElse(fields.indexWhere(_.equalsIgnoreCase(n)))
        GetStructField(struct, at, Some(fields(at)))
      }
    case _ => args
  }
}
