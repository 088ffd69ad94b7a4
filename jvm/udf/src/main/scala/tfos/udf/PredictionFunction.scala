package tfos.udf

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.sql.AnalysisException
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, Expression}
import org.apache.spark.sql.classic.SparkSession
import org.apache.spark.sql.execution.python.UserDefinedPythonFunction
import org.apache.spark.sql.types.{ArrayType, DataType, DecimalType, StringType, StructType}

/** The prediction function registered in a session's function registry, with its arguments
  * checked when a query is analysed: a call with the wrong number of arguments, a struct that
  * lacks features or an argument of the wrong type fails before any task runs, with one message
  * naming the function, the fields at fault and the ones expected. A Python UDF alone cannot
  * see its argument types before its tasks run; its builder, called by the analyzer once the
  * arguments are resolved, can. */
object PredictionFunction {

  /** One model input: its name, its kind and the type labels (see `label`) it accepts. */
  final case class Input(name: String, kind: String, accepted: Seq[String])

  /** Register `udf` as the session's temporary function `name`, checking its arguments
    * against `inputsJson`: a JSON list of {"name", "kind", "types"}, in the model's order. */
  def register(session: SparkSession, name: String, udf: UserDefinedPythonFunction, inputsJson: String): Unit = {
    val inputs = parse(inputsJson)
    val builder = (args: Seq[Expression]) => {
      check(name, inputs, args)
      udf.builder(args)
    }
    session.sessionState.functionRegistry.createOrReplaceTempFunction(name, builder, "python_udf")
  }

  /** Wrap the function `name` already in the session's registry (a Python UDF registered by
    * `spark.udf.register`, from a classic or a Connect client) so that its arguments are checked. */
  def wrap(session: SparkSession, name: String, inputsJson: String): Unit = {
    val registry = session.sessionState.functionRegistry
    val builder = registry.lookupFunctionBuilder(FunctionIdentifier(name, Some("session"), Some("system"))).getOrElse(
      throw new IllegalArgumentException(s"no function '$name' is registered in this session"))
    val inputs = parse(inputsJson)
    val checked = (args: Seq[Expression]) => {
      check(name, inputs, args)
      builder(args)
    }
    registry.createOrReplaceTempFunction(name, checked, "python_udf")
  }

  /** Raise the analysis error of a call of `name` on `args`, if anything is wrong with it. */
  def checkArguments(name: String, inputs: Seq[Input], args: Seq[Expression]): Unit = check(name, inputs, args)

  /** Whether one argument of type `t` is the model's only input itself rather than a struct of its inputs. */
  def acceptsAsIs(t: DataType, inputs: Int): Boolean = inputs == 1 && !t.isInstanceOf[StructType]

  private def check(name: String, inputs: Seq[Input], args: Seq[Expression]): Unit =
    problem(name, inputs, args.map(_.dataType)).orElse(misplaced(name, inputs, args.map(columnName)))
      .foreach(message => throw error(name, message))

  private def columnName(e: Expression): Option[String] = e match {
    case a: AttributeReference => Some(a.name)
    case _ => None
  }

  /** Arguments given one per input where a column named as one input stands in another's place (`f(title, medium)`
    * for inputs medium, title): the types may all fit, the scores would not. Names compare as Spark resolves
    * columns, without case. */
  def misplaced(name: String, inputs: Seq[Input], columns: Seq[Option[String]]): Option[String] = {
    val position = inputs.map(_.name.toLowerCase).zipWithIndex.toMap
    if (columns.size != inputs.size || position.size != inputs.size) return None
    val wrong = columns.zipWithIndex.collect {
      case (Some(column), n) if position.get(column.toLowerCase).exists(_ != n) =>
        s"argument ${n + 1} is the column '$column', which is input ${position(column.toLowerCase) + 1}"
    }
    if (wrong.isEmpty) None
    else Some(s"${wrong.mkString("; ")}. $name takes the features as ${inputs.size} arguments in this order: " +
      s"${inputs.map(_.name).mkString(", ")}; or one struct of them")
  }

  /** What is wrong with a call of `name` on arguments of these types, if anything. */
  def problem(name: String, inputs: Seq[Input], types: Seq[DataType]): Option[String] = {
    val forms = s"$name takes the features as ${inputs.size} arguments in this order: " +
      s"${inputs.map(_.name).mkString(", ")}; or one struct of them"
    val found = types match {
      case Seq(struct: StructType) if inputs.size != 1 || !inputs.head.accepted.contains(label(struct)) =>
        val fields = struct.fields.map(f => f.name -> f.dataType).toMap
        val missing = inputs.filterNot(i => fields.contains(i.name)).map(_.name)
        val lacks = if (missing.isEmpty) Nil else Seq(s"the struct lacks feature(s) ${missing.mkString(", ")}")
        lacks ++ inputs.flatMap(i => fields.get(i.name).flatMap(t => mistyped(s"its field '${i.name}'", i, t)))
      case _ if types.size != inputs.size =>
        Seq(s"it was given ${types.size} argument(s)")
      case _ =>
        inputs.zip(types).zipWithIndex.flatMap { case ((i, t), n) => mistyped(s"argument ${n + 1} ('${i.name}')", i, t) }
    }
    if (found.isEmpty) None else Some(s"${found.mkString("; ")}. $forms")
  }

  private def mistyped(what: String, input: Input, t: DataType): Option[String] =
    if (input.accepted.contains(label(t))) None
    else Some(s"$what (${input.kind} feature) has type ${label(t)}, expected one of: ${input.accepted.mkString(", ")}")

  /** A type as the accepted lists spell it: Spark's type name, without a decimal's precision or a
    * string's collation, and an array's element type in brackets. */
  def label(t: DataType): String = t match {
    case ArrayType(element, _) => s"array<${label(element)}>"
    case _: DecimalType => "decimal"
    case _: StringType => "string"
    case other => other.typeName
  }

  def parse(json: String): Seq[Input] =
    new ObjectMapper().readTree(json).elements().asScala.map { node =>
      Input(node.get("name").asText(), node.get("kind").asText(), node.get("types").elements().asScala.map(_.asText()).toSeq)
    }.toSeq

  /** Spark's own condition for arguments a function cannot take (SQLSTATE 42K09). */
  private def error(name: String, message: String): AnalysisException =
    new AnalysisException("DATATYPE_MISMATCH.TYPE_CHECK_FAILURE_WITH_HINT",
      Map("sqlExpr" -> s"\"$name\"", "msg" -> message, "hint" -> ""))
}
