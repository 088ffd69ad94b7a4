package tfos.spark.cluster

import java.io.{DataInputStream, InputStream, OutputStream}
import java.net.{InetAddress, InetSocketAddress, ServerSocket, Socket, SocketTimeoutException}
import java.security.MessageDigest
import java.util.Base64
import java.util.concurrent.{ConcurrentHashMap, LinkedBlockingQueue, TimeUnit}
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.JsonNode
import org.apache.spark.SparkEnv

/** The TF nodes' control channel, carried through the driver to a client they cannot reach.
  *
  * A Spark Connect client runs the control server of its training runs, but executors may have
  * no route to it; they can always reach the driver. A relay is a port on the driver: a node
  * connects, sends one frame holding `RELAY-1 ` and the run's relay token (derived from the run's
  * secret, which only the client and the nodes hold), and from then on its bytes are queued for
  * the client, which takes them, and hands back its own, with `relay.exchange` driver calls. A
  * connection that does not open with the token within a few seconds is closed before any of its
  * bytes is kept. Past the token the relay reads nothing: every message is authenticated end to
  * end, by the client, as on a direct connection (`tfos_jobs.control_channel`). A relay nobody
  * has polled for `IdleMillis` is closed with its connections.
  */
object Relay {
  val Prefix: Array[Byte] = "TFOS-RELAY-1 ".getBytes("US-ASCII")
  val HandshakeMillis = 10000
  val IdleMillis = 120000L
  val MaxPendingBytes: Long = 64L << 20 // a hub stops reading while this much waits for the client
  val MaxReplyBytes: Int = 8 << 20

  private val hubs = new ConcurrentHashMap[String, Hub]()

  private lazy val watchdog: Unit = daemon("tfos-relay-watchdog") {
    while (true) {
      Thread.sleep(IdleMillis / 4)
      closeIdle()
    }
  }

  /** A relay on the driver's bind address, on the first of `ports` that is free (0: any). */
  def open(tokenHex: String, ports: Seq[Int]): Map[String, Any] = {
    watchdog
    closeIdle()
    val token = hex(tokenHex)
    require(token.length >= 16, "a relay token has at least 16 bytes")
    val conf = SparkEnv.get.conf
    val host = conf.get("spark.driver.host", InetAddress.getLocalHost.getHostAddress)
    val bind = conf.get("spark.driver.bindAddress", host)
    val server = listen(bind, if (ports.isEmpty) Seq(0) else ports)
    val hub = new Hub(Ids.next(), token, server)
    hubs.put(hub.id, hub)
    hub.start()
    Map("id" -> hub.id, "host" -> host, "port" -> hub.server.getLocalPort)
  }

  private def listen(bind: String, ports: Seq[Int]): ServerSocket = {
    val errors = mutable.ArrayBuffer[String]()
    for (port <- ports) {
      val server = new ServerSocket()
      try {
        server.setReuseAddress(true)
        server.bind(new InetSocketAddress(bind, port), 64)
        return server
      } catch {
        case e: java.io.IOException =>
          server.close()
          errors += s"$port: ${e.getMessage}"
      }
    }
    throw new java.io.IOException(s"the relay cannot listen on $bind (ports tried: ${errors.take(5).mkString("; ")})")
  }

  def exchange(id: String, out: JsonNode, waitMillis: Long): Map[String, Any] = {
    val hub = hubs.get(id)
    if (hub == null) throw new IllegalStateException(s"no relay $id (closed, or left idle for ${IdleMillis / 1000} s)")
    hub.exchange(out, math.min(math.max(waitMillis, 0L), 30000L))
  }

  def close(id: String): Unit = Option(hubs.remove(id)).foreach(_.close())

  private def closeIdle(): Unit = {
    val now = System.currentTimeMillis()
    hubs.values().asScala.filter(h => now - h.polled.get > IdleMillis).foreach(h => close(h.id))
  }

  private def hex(text: String): Array[Byte] = text.grouped(2).map(Integer.parseInt(_, 16).toByte).toArray

  private sealed trait Event { def bytes: Int = 0 }
  private final case class Opened(conn: Int, peer: String) extends Event
  private final case class Received(conn: Int, data: Array[Byte]) extends Event { override def bytes: Int = data.length }
  private final case class Closed(conn: Int) extends Event

  final class Hub(val id: String, token: Array[Byte], val server: ServerSocket) {
    val polled = new AtomicLong(System.currentTimeMillis())
    private val events = new LinkedBlockingQueue[Event]()
    private val pending = new AtomicLong(0)
    private val conns = new ConcurrentHashMap[Integer, Socket]()
    private val nextConn = new AtomicInteger(0)
    @volatile private var closed = false

    def start(): Unit = daemon(s"tfos-relay-$id") {
      while (!closed) {
        try {
          val socket = server.accept()
          daemon(s"tfos-relay-$id-conn")(serve(socket))
        } catch { case _: java.io.IOException if closed => }
      }
    }

    private def serve(socket: Socket): Unit = {
      try {
        socket.setSoTimeout(HandshakeMillis)
        val in = new DataInputStream(socket.getInputStream)
        val length = in.readInt()
        val expected = Prefix ++ token
        if (length != expected.length) { socket.close(); return }
        val body = new Array[Byte](length)
        in.readFully(body)
        if (!MessageDigest.isEqual(body, expected)) { socket.close(); return }
        socket.setSoTimeout(0)
        socket.setTcpNoDelay(true)
        val conn = nextConn.incrementAndGet()
        conns.put(conn, socket)
        offer(Opened(conn, socket.getInetAddress.getHostAddress))
        pump(conn, socket.getInputStream)
      } catch {
        case _: SocketTimeoutException | _: java.io.IOException => scala.util.Try(socket.close())
      }
    }

    /** A connection's bytes to the queue, as they arrive, until it closes. */
    private def pump(conn: Int, in: InputStream): Unit = {
      val buffer = new Array[Byte](65536)
      try {
        var n = in.read(buffer)
        while (n >= 0 && !closed) {
          while (pending.get > MaxPendingBytes && !closed) Thread.sleep(20)
          if (n > 0) offer(Received(conn, java.util.Arrays.copyOf(buffer, n)))
          n = in.read(buffer)
        }
      } catch { case _: java.io.IOException => }
      if (conns.remove(conn) != null) offer(Closed(conn))
    }

    private def offer(event: Event): Unit = {
      pending.addAndGet(event.bytes)
      events.put(event)
    }

    /** Writes the client's bytes (`out`: [[conn, base64 or null to close]]), then returns the
      * events that arrive within `waitMillis` (at once when some are waiting). */
    def exchange(out: JsonNode, waitMillis: Long): Map[String, Any] = {
      polled.set(System.currentTimeMillis())
      if (out != null) {
        for (item <- out.elements().asScala) {
          val conn = item.get(0).asInt()
          val socket = conns.get(conn)
          if (socket != null) {
            if (item.get(1).isNull) { conns.remove(conn); scala.util.Try(socket.close()) }
            else {
              try {
                val stream: OutputStream = socket.getOutputStream
                stream.write(Base64.getDecoder.decode(item.get(1).asText()))
                stream.flush()
              } catch { case _: java.io.IOException => conns.remove(conn); scala.util.Try(socket.close()); offer(Closed(conn)) }
            }
          }
        }
      }
      val taken = mutable.ArrayBuffer[Event]()
      val first = events.poll(waitMillis, TimeUnit.MILLISECONDS)
      if (first != null) {
        taken += first
        var size = first.bytes
        while (size < MaxReplyBytes && !events.isEmpty) {
          val next = events.poll()
          if (next != null) { taken += next; size += next.bytes }
        }
      }
      pending.addAndGet(-taken.map(_.bytes.toLong).sum)
      val encoder = Base64.getEncoder
      Map("events" -> taken.map {
        case Opened(conn, peer) => Seq("open", conn, peer)
        case Received(conn, data) => Seq("data", conn, encoder.encodeToString(data))
        case Closed(conn) => Seq("closed", conn, null)
      }.toSeq)
    }

    def close(): Unit = {
      closed = true
      scala.util.Try(server.close())
      conns.values().asScala.foreach(s => scala.util.Try(s.close()))
      conns.clear()
    }
  }

  private def daemon(name: String)(body: => Unit): Unit = {
    val thread = new Thread(() => body, name)
    thread.setDaemon(true)
    thread.start()
  }
}
