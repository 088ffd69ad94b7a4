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

/** Files of an isolated session (a Spark Connect client's, whose artifacts are its own): on each executor they lie in
  * a directory of the session's under the application's files (as the Python worker of such a session sees them),
  * not among the files added to the application. */
object SessionFiles {
  /** The isolated session this thread works for (on the driver, while it runs a client's request), if any. */
  def current(): Option[String] = org.apache.spark.JobArtifactSet.getCurrentJobArtifactState.map(_.uuid)

  /** Where `name` is on this executor: in `session`'s directory where it was added to that session, else where a
    * file added to the application is. */
  def get(name: String, session: Option[String]): String =
    session.map(s => new java.io.File(new java.io.File(org.apache.spark.SparkFiles.getRootDirectory(), s), name))
      .filter(_.exists).map(_.getAbsolutePath).getOrElse(org.apache.spark.SparkFiles.get(name))
}
