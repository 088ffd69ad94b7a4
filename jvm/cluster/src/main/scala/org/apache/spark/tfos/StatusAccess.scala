package org.apache.spark.tfos

import org.apache.spark.SparkContext
import org.apache.spark.status.AppStatusStore

/** What the package reads of Spark's internals (private to Spark's packages): the status store (which jobs carry
  * a tag, their tasks' errors) and an executor's local directories. */
object StatusAccess {
  def store(sc: SparkContext): AppStatusStore = sc.statusStore

  /** Wait until the status store has heard of every event posted so far (a job just ended). */
  def settle(sc: SparkContext): Unit = sc.listenerBus.waitUntilEmpty()

  /** One of this executor's local directories (spark.local.dir, or the cluster manager's). */
  def localDir(): String = org.apache.spark.util.Utils.getLocalDir(org.apache.spark.SparkEnv.get.conf)
}

/** A thread of the package's that works for a task (reads its input for it) sees the task's context, as Spark's
  * own helper threads do. */
object TaskThreads {
  def inherit(context: org.apache.spark.TaskContext): Unit = org.apache.spark.TaskContext.setTaskContext(context)
  def forget(): Unit = org.apache.spark.TaskContext.unset()
}
