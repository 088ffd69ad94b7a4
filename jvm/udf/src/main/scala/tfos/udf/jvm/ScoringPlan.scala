package tfos.udf.jvm

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.spark.sql.types._

/** What the JVM prediction function needs to score a model: plain values, serialized with each task.
  * Made from the model's feature spec by the Python side (`udfs.jvm_plan`, which owns the field
  * names) and read here once, when the function is registered. */
final case class ScoringPlan(
    archive: String, // the model's archive in the application (SparkFiles), unpacked on each executor
    version: String,
    signature: String,
    task: String, // contracts.serving.task_of
    classes: Seq[String], // a classifier's label for each class id
    fields: Seq[String], // the result struct's fields (a regression returns a bare double)
    outputs: Map[String, String], // result field or "class_id" -> the signature's output
    inputs: Seq[PlanInput],
    rowsKey: String,
    batchSize: Int,
    // a wide & deep model's signature that takes the categorical inputs as their distinct values and a code per row
    // (`contracts.serving.CODES_SIGNATURE`): signature, then its inputs' names (strings, codes, numbers); empty: none
    codes: Seq[String],
    // the isolated session (a Spark Connect client's) that shipped the archive as its own artifact, set when the
    // function is registered in it: the executors find the archive in that session's files
    session: Option[String] = None) {

  def returnsStruct: Boolean = fields.size != 1 || task != ScoringPlan.Regression

  /** The function's result type, as `contracts.serving.udf_return_type` gives it to the Python UDF. */
  def resultType: DataType =
    if (!returnsStruct) DoubleType
    else if (task == ScoringPlan.Autoencoder)
      StructType(Seq(StructField(fields(0), ArrayType(FloatType)), StructField(fields(1), DoubleType),
        StructField(fields(2), BooleanType)))
    else StructType(Seq(StructField(fields(0), DoubleType), StructField(fields(1), StringType)))

  /** The result and the batch's counters (on its first row), as `contracts.serving.counted_return_type`. */
  def countedType(valueField: String, countsField: String): DataType =
    StructType(Seq(StructField(valueField, resultType), StructField(countsField, MapType(StringType, LongType))))
}

/** One model input. `kind`: "string" (a category or a window's asset), "number", "window" (a
  * sequence: `width` steps), "vector" (`width` values), "text" (raw, tokenized by the graph), "list"
  * (`width` elements, padded with `defaultText`). Counter keys are empty where the input has
  * no such counter. */
final case class PlanInput(
    name: String,
    kind: String,
    defaultText: String,
    defaultNumber: Double,
    maxLength: Int, // a category's length in characters, a text's words, a list's elements; -1 for none
    ngrams: Int, // a text's tokens: its words (1), and their pairs (2)
    width: Int,
    vocabFile: String, // relative to the model directory; "" for none
    assetsFile: String, // a window key's trained assets: the stats file and the key's entry in it
    assetsKey: String,
    assetsField: String,
    nullKey: String,
    unseenKey: String,
    truncatedKey: String) {
  def hasVocabulary: Boolean = vocabFile.nonEmpty || assetsFile.nonEmpty
}

object ScoringPlan {
  val Regression = "regression"
  val Autoencoder = "autoencoder"
  val Kinds = Set("string", "number", "window", "vector", "text", "list")

  def parse(json: String): ScoringPlan = {
    val root = new ObjectMapper().readTree(json)
    def text(node: JsonNode, key: String): String = Option(node.get(key)).filterNot(_.isNull).map(_.asText()).getOrElse("")
    def texts(node: JsonNode, key: String): Seq[String] =
      Option(node.get(key)).map(_.elements().asScala.map(_.asText()).toSeq).getOrElse(Nil)
    val inputs = root.get("inputs").elements().asScala.map { n =>
      val input = PlanInput(text(n, "name"), text(n, "kind"), text(n, "default_text"),
        Option(n.get("default_number")).filterNot(_.isNull).map(_.asDouble()).getOrElse(0.0),
        Option(n.get("max_length")).filterNot(_.isNull).map(_.asInt()).getOrElse(-1),
        Option(n.get("ngrams")).filterNot(_.isNull).map(_.asInt()).getOrElse(1),
        Option(n.get("width")).filterNot(_.isNull).map(_.asInt()).getOrElse(0),
        text(n, "vocab_file"), text(n, "assets_file"), text(n, "assets_key"), text(n, "assets_field"),
        text(n, "null_key"), text(n, "unseen_key"), text(n, "truncated_key"))
      require(Kinds.contains(input.kind), s"input '${input.name}': no kind '${input.kind}' (one of ${Kinds.mkString(", ")})")
      input
    }.toIndexedSeq
    val outputs = root.get("outputs").fieldNames().asScala.map(k => k -> root.get("outputs").get(k).asText()).toMap
    ScoringPlan(text(root, "archive"), text(root, "version"), text(root, "signature"), text(root, "task"),
      texts(root, "classes"), texts(root, "fields"), outputs, inputs, text(root, "rows_key"),
      Option(root.get("batch_size")).filterNot(_.isNull).map(_.asInt()).getOrElse(10000), texts(root, "codes"))
  }
}
