package tfos.udf.jvm

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.SparkEnv
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, SpecializedGetters, UnsafeArrayData, UnsafeRow}
import org.apache.spark.sql.catalyst.util.ArrayData
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.array.ByteArrayMethods
import org.apache.spark.unsafe.types.UTF8String
import org.tensorflow.{SavedModelBundle, SessionFunction, Tensor}
import org.tensorflow.ndarray.{NdArrays, Shape}
import org.tensorflow.ndarray.buffer.DataBuffers
import org.tensorflow.proto.{ConfigProto, DataType => TFType}
import org.tensorflow.types.{TBool, TFloat32, TFloat64, TInt32, TInt64, TString}

/** A SavedModel loaded in this JVM: its serving function and the vocabularies its inputs are
  * counted against. One per model version and executor, shared by the executor's task threads
  * (a TensorFlow session runs concurrent calls); TensorFlow's threads sized to the executor's cores. */
final class LoadedModel(val dir: String, plan: ScoringPlan) extends AutoCloseable {
  private val cores = Option(SparkEnv.get).map(_.conf.getInt("spark.executor.cores",
    Runtime.getRuntime.availableProcessors)).getOrElse(Runtime.getRuntime.availableProcessors)
  private val bundle = SavedModelBundle.loader(dir).withTags("serve").withConfigProto(
    ConfigProto.newBuilder().setIntraOpParallelismThreads(cores).setInterOpParallelismThreads(cores).build()).load()
  val function: SessionFunction = try bundle.function(plan.signature) catch {
    case e: IllegalArgumentException =>
      bundle.close()
      throw new IllegalArgumentException(s"the SavedModel in $dir has no signature '${plan.signature}'", e)
  }
  /** The signature taking categories as distinct values and codes, when the plan names one and the model has it. */
  val codesFunction: Option[SessionFunction] = plan.codes.headOption.filter(name =>
    bundle.signatures().asScala.exists(_.key() == name)).map(bundle.function)
  /** The signature's input dtypes, by input name. */
  val inputTypes: Map[String, TFType] = function.signature().getInputs.asScala.map { case (k, v) => k -> v.dataType }.toMap
  val vocabularies: Map[String, java.util.Set[UTF8String]] = plan.inputs.filter(_.hasVocabulary).map { input =>
    val values = if (input.vocabFile.nonEmpty) lines(Paths.get(dir, input.vocabFile))
      else trainedAssets(Paths.get(dir, input.assetsFile), input.assetsKey, input.assetsField)
    input.name -> new java.util.HashSet[UTF8String](values.map(UTF8String.fromString).asJava)
  }.toMap

  private def lines(path: java.nio.file.Path): Seq[String] =
    Files.readAllLines(path, StandardCharsets.UTF_8).asScala.toSeq

  private def trainedAssets(path: java.nio.file.Path, key: String, field: String): Seq[String] = {
    val entry = new ObjectMapper().readTree(path.toFile).path(key).path(field)
    if (entry.isObject) entry.fieldNames().asScala.toSeq else Nil
  }

  override def close(): Unit = bundle.close()
}

/** The executor's loaded models, kept while tasks use them: at most `Capacity` (a newer version of a
  * model replaces the older one, which is closed, freeing TensorFlow's memory, once no task holds it). */
object SavedModels {
  val Capacity = 3
  // JavaCPP, under TensorFlow Java, reads the process's resident size at every native allocation to enforce a limit
  // (by default twice the heap): a string tensor allocates once per element. TensorFlow's memory is off-heap and
  // counted in spark.executor.memoryOverhead, so no limit here, unless one is set.
  if (System.getProperty("org.bytedeco.javacpp.maxPhysicalBytes") == null)
    System.setProperty("org.bytedeco.javacpp.maxPhysicalBytes", "0")
  private final class Entry(val model: LoadedModel) { var users = 0; var evicted = false }
  private val entries = new java.util.LinkedHashMap[String, Entry](16, 0.75f, true)
  private val byModel = new java.util.IdentityHashMap[LoadedModel, Entry]()

  def acquire(plan: ScoringPlan): LoadedModel = synchronized {
    val key = s"${plan.archive}@${plan.signature}"
    val entry = Option(entries.get(key)).getOrElse {
      val made = new Entry(new LoadedModel(org.apache.spark.tfos.SessionFiles.get(plan.archive, plan.session), plan))
      entries.put(key, made)
      byModel.put(made.model, made)
      while (entries.size > Capacity) {
        val eldest = entries.entrySet().iterator().next()
        entries.remove(eldest.getKey)
        eldest.getValue.evicted = true
        if (eldest.getValue.users == 0) closeEntry(eldest.getValue)
      }
      made
    }
    entry.users += 1
    entry.model
  }

  def release(model: LoadedModel): Unit = synchronized {
    Option(byModel.get(model)).foreach { entry =>
      entry.users -= 1
      if (entry.users == 0 && entry.evicted) closeEntry(entry)
    }
  }

  /** How many models this JVM holds open (loaded and not yet freed). */
  def open: Int = synchronized(byModel.size)

  private def closeEntry(entry: Entry): Unit = {
    byModel.remove(entry.model)
    entry.model.close()
  }
}

/** One task's scoring of batches: rows holding the model's inputs (input `i`, of `types(i)`, at `ordinals(i)`)
  * in, one result per row out, as the Python UDF makes them (`udfs.predict.Scorer`): a null takes the spec's
  * default, a category is cut to its max_length and checked against its vocabulary, all counted. Reading the
  * inputs where they are spares a copy of each row's arguments. */
final class Scoring(plan: ScoringPlan, types: Seq[DataType], ordinals: Array[Int]) extends AutoCloseable {
  def this(plan: ScoringPlan, types: Seq[DataType]) = this(plan, types, Array.range(0, types.size))
  require(ordinals.length == plan.inputs.size && types.size == plan.inputs.size,
    s"the model takes ${plan.inputs.size} inputs; given ${types.size} types and ${ordinals.length} ordinals")
  private val model = SavedModels.acquire(plan)
  private val inputs = plan.inputs.toArray
  private val readers = inputs.zip(types).map { case (input, t) => InputReader(input, t) }
  private val defaultTexts = inputs.map(input => UTF8String.fromString(input.defaultText)) // what a null becomes
  private val classes = plan.classes.map(UTF8String.fromString).toArray

  override def close(): Unit = SavedModels.release(model)

  /** Whether the model takes its categories as codes (`Coded` batches, filled row by row). */
  def coded: Boolean = model.codesFunction.isDefined

  def score(rows: Array[InternalRow], counts: mutable.Map[String, Long]): Array[Any] =
    if (coded) {
      val batch = new Coded(rows.length)
      rows.foreach(batch.add)
      score(batch, counts)
    } else {
      val feeds = new java.util.HashMap[String, Tensor]()
      try {
        var i = 0
        while (i < inputs.length) { feeds.put(inputs(i).name, tensor(i, rows, counts)); i += 1 }
        call(model.function, feeds, rows.length, counts)
      } finally feeds.values().asScala.foreach(_.close())
    }

  def score(batch: Scoring#Coded, counts: mutable.Map[String, Long]): Array[Any] = {
    require(batch.scoring eq this, "a batch is scored by the scoring that made it")
    val feeds = new java.util.HashMap[String, Tensor]()
    try {
      batch.feeds(feeds, counts)
      call(model.codesFunction.get, feeds, batch.size, counts)
    } finally feeds.values().asScala.foreach(_.close())
  }

  private def call(function: SessionFunction, feeds: java.util.Map[String, Tensor], n: Int,
                   counts: mutable.Map[String, Long]): Array[Any] = {
    val result = function.call(feeds)
    try {
      tally(counts, plan.rowsKey, n)
      results(n, name => result.get(plan.outputs.getOrElse(name, name)).orElseThrow(() =>
        new IllegalStateException(s"the SavedModel's ${plan.signature} has no output '${plan.outputs.getOrElse(name, name)}'")))
    } finally result.close()
  }

  private def results(n: Int, output: String => Tensor): Array[Any] = plan.task match {
    case ScoringPlan.Regression if !plan.returnsStruct =>
      doubles(output("value"), n).map(v => v: Any)
    case ScoringPlan.Autoencoder =>
      val errors = doubles(output(plan.fields(1)), n)
      val flags = booleans(output(plan.fields(2)), n)
      val latent = output(plan.fields(0))
      val width = if (latent.shape().numDimensions() == 2) latent.shape().get(1).toInt else 0
      val values = floats(latent, n * width)
      Array.tabulate[Any](n) { i =>
        new GenericInternalRow(Array[Any](
          UnsafeArrayData.fromPrimitiveArray(java.util.Arrays.copyOfRange(values, i * width, (i + 1) * width)),
          errors(i), flags(i)))
      }
    case _ =>
      val probability = doubles(output(plan.fields(0)), n)
      val ids = longs(output("class_id"), n)
      Array.tabulate[Any](n) { i => new GenericInternalRow(Array[Any](probability(i), classes(ids(i).toInt))) }
  }

  // the codes signature's inputs: the categorical ones, then the numeric ones
  private val categorical = inputs.indices.filter(i => inputs(i).kind == "string").toArray
  private val numeric = inputs.indices.filter(i => inputs(i).kind == "number").toArray
  private val codedAt = categorical.map(ordinals(_)) ++ numeric.map(ordinals(_))
  private val limits = categorical.map(i => if (inputs(i).maxLength >= 0) inputs(i).maxLength else Int.MaxValue)
  private val texts = categorical.map(i => types(i).isInstanceOf[StringType])
  private val defaults = numeric.map(inputs(_).defaultNumber.toFloat)

  /** A batch for the codes signature, filled as rows come (`add`: nothing of a row is kept, so an operator may refill
    * it next), up to `capacity` rows: every categorical column's distinct values one column after another, per
    * categorical column and row an index into them, per numeric column and row its value (nulls filled). A batch's
    * strings are then its few distinct values, not one per row and column: TensorFlow Java copies each string
    * element into native memory one by one. */
  final class Coded(capacity: Int) {
    def scoring: Scoring = Scoring.this
    private val indexes = categorical.map(_ => new DistinctValues)
    private val nulls, cut = new Array[Long](categorical.length + numeric.length)
    private val codes = new Array[Int](categorical.length * capacity)
    private val numbers = new Array[Float](numeric.length * capacity)
    private var n = 0

    def size: Int = n

    def add(row: InternalRow): Unit = {
      val unsafe = row match { case u: UnsafeRow => u; case _ => null }
      var c = 0
      while (c < categorical.length) {
        val o = codedAt(c)
        codes(c * capacity + n) =
          if (unsafe != null && texts(c) && !unsafe.isNullAt(o) && (unsafe.getLong(o) & 0xFFFFFFFFL) <= limits(c)) {
            // the value's bytes where they are (no more bytes than the limit has characters: not cut)
            val offsetAndSize = unsafe.getLong(o)
            indexes(c).code(unsafe.getBaseObject, unsafe.getBaseOffset + (offsetAndSize >>> 32), offsetAndSize.toInt)
          } else {
            var v = if (row.isNullAt(o)) { nulls(c) += 1; defaultTexts(categorical(c)) }
              else readers(categorical(c)).text(row, o)
            if (v.numBytes() > limits(c) && v.numChars() > limits(c)) { cut(c) += 1; v = v.substring(0, limits(c)) }
            indexes(c).code(v)
          }
        c += 1
      }
      c = 0
      while (c < numeric.length) {
        val o = codedAt(categorical.length + c)
        val v = if (row.isNullAt(o)) Double.NaN else readers(numeric(c)).number(row, o)
        numbers(c * capacity + n) = if (v.isNaN) { nulls(categorical.length + c) += 1; defaults(c) } else v.toFloat
        c += 1
      }
      n += 1
    }

    /** The three inputs, and the batch's counters. */
    def feeds(feeds: java.util.Map[String, Tensor], counts: mutable.Map[String, Long]): Unit = {
      val Seq(_, stringsName, codesName, numbersName) = plan.codes
      val packedCodes = packed(codes, categorical.length)
      val strings = mutable.ArrayBuffer[Array[Byte]]()
      categorical.indices.foreach { c =>
        val input = inputs(categorical(c))
        val values = indexes(c).values
        val first = strings.size
        strings ++= values
        // the rows holding a value outside the vocabulary, looked up once per distinct value
        val outside = model.vocabularies.get(input.name).map(known => values.map(v => !known.contains(UTF8String.fromBytes(v))))
        var unseen = 0L
        var k = c * n
        while (k < (c + 1) * n) {
          if (outside.exists(_(packedCodes(k)))) unseen += 1
          packedCodes(k) += first
          k += 1
        }
        tally(counts, input.nullKey, nulls(c)); tally(counts, input.truncatedKey, cut(c)); tally(counts, input.unseenKey, unseen)
      }
      numeric.indices.foreach(c => tally(counts, inputs(numeric(c)).nullKey, nulls(categorical.length + c)))
      feeds.put(stringsName, TString.tensorOfBytes(NdArrays.vectorOfObjects(strings.toSeq: _*)))
      feeds.put(codesName, TInt32.tensorOf(Shape.of(categorical.length.toLong, n.toLong), DataBuffers.of(packedCodes, true, false)))
      feeds.put(numbersName, TFloat32.tensorOf(Shape.of(numeric.length.toLong, n.toLong),
        DataBuffers.of(packed(numbers, numeric.length), true, false)))
    }

    /** [columns, capacity] as [columns, n]. */
    private def packed[A](values: Array[A], columns: Int): Array[A] =
      if (n == capacity) values
      else {
        val out = java.lang.reflect.Array.newInstance(values.getClass.getComponentType, columns * n).asInstanceOf[Array[A]]
        (0 until columns).foreach(c => System.arraycopy(values, c * capacity, out, c * n, n))
        out
      }
  }

  /** Input `i` of a batch's rows as its tensor. One method per kind: a single method holding them all was compiled
    * (C2) again and again, each time for over a second of a core, long after the first rows. */
  private def tensor(i: Int, rows: Array[InternalRow], counts: mutable.Map[String, Long]): Tensor = {
    val input = inputs(i)
    val dtype = model.inputTypes.getOrElse(input.name, throw new IllegalStateException(
      s"the SavedModel's ${plan.signature} has no input '${input.name}'; it has ${model.inputTypes.keys.mkString(", ")}"))
    input.kind match {
      case "string" => categories(i, rows, counts)
      case "number" => numbers(dtype, Shape.of(rows.length.toLong), scalars(i, rows, counts), input.name)
      case "text" => texts(i, rows, counts)
      case "list" => lists(i, rows, counts)
      case kind => // "window" or "vector": [rows, width]
        numbers(dtype, Shape.of(rows.length.toLong, input.width.toLong), dense(i, kind == "window", rows, counts), input.name)
    }
  }

  private def categories(i: Int, rows: Array[InternalRow], counts: mutable.Map[String, Long]): Tensor = {
    val (input, reader, at) = (inputs(i), readers(i), ordinals(i))
    val vocab = model.vocabularies.get(input.name)
    val values = new Array[Array[Byte]](rows.length)
    var nulls, cut, unseen = 0L
    var r = 0
    while (r < rows.length) {
      var v = if (rows(r).isNullAt(at)) { nulls += 1; defaultTexts(i) } else reader.text(rows(r), at)
      if (input.maxLength >= 0 && v.numBytes() > input.maxLength && v.numChars() > input.maxLength) { cut += 1; v = v.substring(0, input.maxLength) }
      if (vocab.exists(!_.contains(v))) unseen += 1
      values(r) = v.getBytes
      r += 1
    }
    tally(counts, input.nullKey, nulls); tally(counts, input.truncatedKey, cut); tally(counts, input.unseenKey, unseen)
    TString.tensorOfBytes(NdArrays.vectorOfObjects(values: _*))
  }

  private def scalars(i: Int, rows: Array[InternalRow], counts: mutable.Map[String, Long]): Array[Double] = {
    val (input, reader, at) = (inputs(i), readers(i), ordinals(i))
    val values = new Array[Double](rows.length)
    var filled = 0L
    var r = 0
    while (r < rows.length) {
      val v = if (rows(r).isNullAt(at)) Double.NaN else reader.number(rows(r), at)
      values(r) = if (v.isNaN) { filled += 1; input.defaultNumber } else v
      r += 1
    }
    tally(counts, input.nullKey, filled)
    values
  }

  /** The raw texts (the graph tokenizes them); their words counted here by the same rule. */
  private def texts(i: Int, rows: Array[InternalRow], counts: mutable.Map[String, Long]): Tensor = {
    val (input, at) = (inputs(i), ordinals(i))
    val vocab = model.vocabularies.get(input.name)
    val values = new Array[Array[Byte]](rows.length)
    var nulls, cut, unseen = 0L
    var r = 0
    while (r < rows.length) {
      val text = if (rows(r).isNullAt(at)) { nulls += 1; "" } else rows(r).getUTF8String(at).toString
      val words = Scoring.words(text)
      if (words.length > input.maxLength) cut += 1
      val kept = words.take(input.maxLength)
      val tokens = if (input.ngrams == 2) kept ++ kept.sliding(2).filter(_.length == 2).map(_.mkString(" ")) else kept
      vocab.foreach(v => unseen += tokens.count(t => !v.contains(UTF8String.fromString(t))))
      values(r) = text.getBytes(StandardCharsets.UTF_8)
      r += 1
    }
    tally(counts, input.nullKey, nulls); tally(counts, input.truncatedKey, cut); tally(counts, input.unseenKey, unseen)
    TString.tensorOfBytes(NdArrays.vectorOfObjects(values: _*))
  }

  /** [rows, max_length] elements as prepare stores them: nulls and empties left out, cut, padded. */
  private def lists(i: Int, rows: Array[InternalRow], counts: mutable.Map[String, Long]): Tensor = {
    val (input, reader, at) = (inputs(i), readers(i), ordinals(i))
    val vocab = model.vocabularies.get(input.name)
    val (n, w) = (rows.length, input.width)
    val pad = defaultTexts(i).getBytes
    val values = new Array[Array[Byte]](n * w)
    java.util.Arrays.fill(values.asInstanceOf[Array[AnyRef]], pad)
    var nulls, cut, unseen = 0L
    var r = 0
    while (r < n) {
      if (rows(r).isNullAt(at)) nulls += 1
      else {
        val elements = rows(r).getArray(at)
        var kept, k = 0
        while (k < elements.numElements()) {
          val e = if (elements.isNullAt(k)) null else reader.element(elements, k)
          if (e == null || e.numBytes() == 0) nulls += 1
          else {
            if (kept < input.maxLength) {
              if (vocab.exists(!_.contains(e))) unseen += 1
              values(r * w + kept) = e.getBytes
            }
            kept += 1
          }
          k += 1
        }
        if (kept > input.maxLength) cut += 1
      }
      r += 1
    }
    tally(counts, input.nullKey, nulls); tally(counts, input.truncatedKey, cut); tally(counts, input.unseenKey, unseen)
    TString.tensorOfBytes(NdArrays.wrap(Shape.of(n.toLong, w.toLong), DataBuffers.ofObjects(values: _*)))
  }

  /** A window's or vector's values, [rows, width] flattened: a null vector is zeros, a null window an error. */
  private def dense(i: Int, window: Boolean, rows: Array[InternalRow], counts: mutable.Map[String, Long]): Array[Double] = {
    val (input, reader, at) = (inputs(i), readers(i), ordinals(i))
    val w = input.width
    val values = new Array[Double](rows.length * w)
    var nulls = 0L
    var r = 0
    while (r < rows.length) {
      if (rows(r).isNullAt(at)) {
        if (window) throw new IllegalArgumentException(
          s"column '${input.name}' (sequence feature): the model takes windows of $w values, row $r of a batch has a null")
        nulls += 1 // a null vector: zeros
      } else reader.fill(rows(r).getArray(at), values, r * w, w, r)
      r += 1
    }
    tally(counts, input.nullKey, nulls)
    values
  }

  private def numbers(dtype: TFType, shape: Shape, values: Array[Double], name: String): Tensor = dtype match {
    case TFType.DT_FLOAT => TFloat32.tensorOf(shape, DataBuffers.of(values.map(_.toFloat), true, false))
    case TFType.DT_DOUBLE => TFloat64.tensorOf(shape, DataBuffers.of(values, true, false))
    case other => throw new IllegalStateException(s"the SavedModel's input '$name' takes $other; numbers go as float or double")
  }

  private def tally(counts: mutable.Map[String, Long], key: String, n: Long): Unit =
    if (n != 0 && key.nonEmpty) counts(key) = counts.getOrElse(key, 0L) + n

  private def doubles(t: Tensor, n: Int): Array[Double] = t match {
    case f: TFloat32 => val a = new Array[Float](n); f.copyTo(DataBuffers.of(a, false, false)); a.map(_.toDouble)
    case d: TFloat64 => val a = new Array[Double](n); d.copyTo(DataBuffers.of(a, false, false)); a
    case other => throw new IllegalStateException(s"an output of type ${other.dataType()} where a number was expected")
  }

  private def floats(t: Tensor, size: Int): Array[Float] = t match {
    case f: TFloat32 => val a = new Array[Float](size); f.copyTo(DataBuffers.of(a, false, false)); a
    case other => doubles(other, size).map(_.toFloat)
  }

  private def longs(t: Tensor, n: Int): Array[Long] = t match {
    case l: TInt64 => val a = new Array[Long](n); l.copyTo(DataBuffers.of(a, false, false)); a
    case i: TInt32 => val a = new Array[Int](n); i.copyTo(DataBuffers.of(a, false, false)); a.map(_.toLong)
    case other => throw new IllegalStateException(s"a class id of type ${other.dataType()}")
  }

  private def booleans(t: Tensor, n: Int): Array[Boolean] = t match {
    case b: TBool => val a = new Array[Boolean](n); b.copyTo(DataBuffers.of(a, false, false)); a
    case other => throw new IllegalStateException(s"an anomaly flag of type ${other.dataType()}")
  }
}

/** A column's distinct values in a batch, each given a code (0, 1, ... in order of appearance). Its own table,
  * on the values' bytes where they lie: a batch looks up every row's value, and a UTF8String per row and its hash
  * (Murmur3, four bytes a round and then byte by byte) cost more than the rest of the row's scoring. */
final class DistinctValues {
  private var keys = new Array[Array[Byte]](64)
  private var codes = new Array[Int](64)
  private var hashes = new Array[Long](64)
  private var count = 0

  def code(v: UTF8String): Int = code(v.getBaseObject, v.getBaseOffset, v.numBytes())

  /** The code of the value in `size` bytes at `offset` of `base` (an array, or null for an address), added if new. */
  def code(base: AnyRef, offset: Long, size: Int): Int = {
    val h = DistinctValues.hash(base, offset, size)
    var slot = (h & (keys.length - 1)).toInt
    while (keys(slot) != null) {
      val key = keys(slot)
      if (hashes(slot) == h && key.length == size &&
        ByteArrayMethods.arrayEquals(key, Platform.BYTE_ARRAY_OFFSET, base, offset, size)) return codes(slot)
      slot = (slot + 1) & (keys.length - 1)
    }
    val copy = new Array[Byte](size) // the bytes may lie in a row's buffer, refilled later
    Platform.copyMemory(base, offset, copy, Platform.BYTE_ARRAY_OFFSET, size)
    keys(slot) = copy; codes(slot) = count; hashes(slot) = h
    count += 1
    if (count * 2 > keys.length) grow()
    count - 1
  }

  /** The distinct values' bytes, by code. */
  def values: Array[Array[Byte]] = {
    val out = new Array[Array[Byte]](count)
    var slot = 0
    while (slot < keys.length) { if (keys(slot) != null) out(codes(slot)) = keys(slot); slot += 1 }
    out
  }

  private def grow(): Unit = {
    val (oldKeys, oldCodes, oldHashes) = (keys, codes, hashes)
    keys = new Array[Array[Byte]](oldKeys.length * 2); codes = new Array[Int](keys.length); hashes = new Array[Long](keys.length)
    var i = 0
    while (i < oldKeys.length) {
      if (oldKeys(i) != null) {
        var slot = (oldHashes(i) & (keys.length - 1)).toInt
        while (keys(slot) != null) slot = (slot + 1) & (keys.length - 1)
        keys(slot) = oldKeys(i); codes(slot) = oldCodes(i); hashes(slot) = oldHashes(i)
      }
      i += 1
    }
  }
}

object DistinctValues {
  /** Eight bytes a round, multiplied and folded (not for adversaries: a batch's values are the user's own). */
  def hash(base: AnyRef, offset: Long, size: Int): Long = {
    var h = size.toLong * 0x9E3779B97F4A7C15L
    var i = 0
    while (i + 8 <= size) {
      h = (h ^ Platform.getLong(base, offset + i)) * 0xBF58476D1CE4E5B9L
      h ^= h >>> 31
      i += 8
    }
    var tail = 0L
    while (i < size) { tail = (tail << 8) | (Platform.getByte(base, offset + i) & 0xFFL); i += 1 }
    h = (h ^ tail) * 0x94D049BB133111EBL
    h ^ (h >>> 29)
  }
}

object Scoring {
  private val Separators = java.util.regex.Pattern.compile("[^\\p{L}\\p{N}\\p{M}]+")

  /** A text's words by the rule of `features.text`: lowercased by Unicode's rules, split on what is not a
    * letter, a digit or a combining mark, none empty. */
  def words(text: String): Array[String] =
    Separators.split(text.toLowerCase(java.util.Locale.ROOT)).filter(_.nonEmpty)
}

/** How one argument's Spark values become a model input's: a category's text, a number, a window's values. */
final case class InputReader(input: PlanInput, t: DataType) {
  private val element: DataType = t match {
    case ArrayType(e, _) => e
    case _ => NullType
  }

  def text(row: InternalRow, i: Int): UTF8String = InputReader.text(row, i, t)

  def number(row: InternalRow, i: Int): Double = InputReader.number(row, i, t)

  /** A list's element as text (integers as their digits). */
  def element(values: ArrayData, k: Int): UTF8String = InputReader.text(values, k, element)

  /** A window's or vector's `width` values into `out` from `offset`: a wrong length or a null value is an error. */
  def fill(values: ArrayData, out: Array[Double], offset: Int, width: Int, row: Int): Unit = {
    val what = if (input.kind == "window") "sequence feature" else "vector feature"
    val unit = if (input.kind == "window") "windows" else "vectors"
    if (values.numElements() != width) throw new IllegalArgumentException(
      s"column '${input.name}' ($what): the model takes $unit of $width values, row $row of a batch has ${values.numElements()}")
    var k = 0
    while (k < width) {
      val v = if (values.isNullAt(k)) Double.NaN else InputReader.number(values, k, element)
      if (v.isNaN) throw new IllegalArgumentException(
        s"column '${input.name}' ($what): row $row of a batch holds a null value")
      out(offset + k) = v
      k += 1
    }
  }
}

object InputReader {
  /** A number from a row's field or an array's element (both are Spark's SpecializedGetters). */
  def number(values: SpecializedGetters, i: Int, t: DataType): Double = t match {
    case DoubleType => values.getDouble(i)
    case FloatType => values.getFloat(i).toDouble
    case IntegerType => values.getInt(i).toDouble
    case LongType => values.getLong(i).toDouble
    case ShortType => values.getShort(i).toDouble
    case ByteType => values.getByte(i).toDouble
    case BooleanType => if (values.getBoolean(i)) 1.0 else 0.0
    case d: DecimalType => values.getDecimal(i, d.precision, d.scale).toDouble
    case NullType => Double.NaN
    case other => throw new IllegalArgumentException(s"a number was expected, not a value of type ${other.typeName}")
  }

  /** A category's or a list element's text (integers as their digits), from a row's field or an array's element. */
  def text(values: SpecializedGetters, i: Int, t: DataType): UTF8String = t match {
    case _: StringType => values.getUTF8String(i)
    case ByteType => UTF8String.fromString(values.getByte(i).toString)
    case ShortType => UTF8String.fromString(values.getShort(i).toString)
    case IntegerType => UTF8String.fromString(values.getInt(i).toString)
    case LongType => UTF8String.fromString(values.getLong(i).toString)
    case BooleanType => UTF8String.fromString(if (values.getBoolean(i)) "True" else "False")
    case other => UTF8String.fromString(String.valueOf(values.get(i, other)))
  }
}
