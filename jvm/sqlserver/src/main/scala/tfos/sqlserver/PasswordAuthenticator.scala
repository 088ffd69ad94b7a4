package tfos.sqlserver

import java.nio.charset.StandardCharsets.UTF_8
import java.security.{MessageDigest, SecureRandom}
import javax.security.sasl.AuthenticationException

import org.apache.hive.service.auth.PasswdAuthenticationProvider
import org.slf4j.LoggerFactory

/** The password `tfos serve-sql` admits, set from Python over the driver's gateway when the
  * server starts: it never passes through Spark or Hive configuration, logs or files. Only a
  * salted digest is kept, compared in constant time. */
object PasswordAuthenticator {
  private final case class Expected(user: String, salt: Array[Byte], digest: Array[Byte])

  @volatile private var expected: Option[Expected] = None

  /** Failed attempts wait this long before the answer: a password cannot be guessed quickly. */
  @volatile var failureDelayMillis: Long = 1000L

  /** `user` empty: any user name is admitted with the password. */
  def configure(user: String, password: String): Unit = {
    require(password != null && password.nonEmpty, "the password is empty")
    val salt = new Array[Byte](16)
    new SecureRandom().nextBytes(salt)
    expected = Some(Expected(Option(user).getOrElse(""), salt, digest(salt, password)))
  }

  def clear(): Unit = expected = None

  def admits(user: String, password: String): Boolean = expected match {
    case None => false
    case Some(e) =>
      val passwordOk = MessageDigest.isEqual(e.digest, digest(e.salt, Option(password).getOrElse("")))
      passwordOk && (e.user.isEmpty || e.user == user)
  }

  private def digest(salt: Array[Byte], password: String): Array[Byte] = {
    val md = MessageDigest.getInstance("SHA-256")
    md.update(salt)
    md.digest(password.getBytes(UTF_8))
  }
}

/** HiveServer2's CUSTOM authentication provider (`hive.server2.custom.authentication.class`).
  * A refused login is one WARN line here (never the password); the package's log4j2 profile
  * keeps Thrift from logging the same refusal again with its stack. */
class PasswordAuthenticator extends PasswdAuthenticationProvider {
  private val log = LoggerFactory.getLogger(classOf[PasswordAuthenticator])

  override def Authenticate(user: String, password: String): Unit = {
    if (!PasswordAuthenticator.admits(user, password)) {
      log.warn(s"login refused for user '$user'")
      Thread.sleep(PasswordAuthenticator.failureDelayMillis)
      throw new AuthenticationException(s"wrong user name or password for user '$user'")
    }
  }
}
