package org.apache.spark.tfos

import org.apache.spark.SparkContext
import org.apache.spark.status.AppStatusStore

/** Spark's status store (private to Spark's packages): which jobs carry a tag, and their tasks' errors. */
object StatusAccess {
  def store(sc: SparkContext): AppStatusStore = sc.statusStore

  /** Wait until the status store has heard of every event posted so far (a job just ended). */
  def settle(sc: SparkContext): Unit = sc.listenerBus.waitUntilEmpty()
}
