package dev.thaw.bench.server;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * An HTTP/1.1 client on one persistent connection, as little as a client can be: a blocking socket with
 * {@code TCP_NODELAY}, the request written in one flush, the response read on the calling thread. It adds no
 * thread hop and no pool of its own to the round trip it times, so what it measures is the server and loopback.
 * Responses must carry {@code Content-Length} (Vert.x sets it on every {@code end(buffer)}).
 *
 * <p>A client that {@link #KeepAliveClient(String, int, boolean) spins} polls the socket for the response instead of
 * sleeping in {@code read}: its own wake-up after a long wait (which grows with the wait on an idle machine) then
 * stays out of the round trip, which is the server and loopback alone. It burns a core while it waits.
 */
final class KeepAliveClient implements AutoCloseable {

  /** One response: status, headers (names lower-cased), body. */
  record Response(int status, Map<String, String> headers, byte[] body) {
    String header(String name) {
      return headers.get(name.toLowerCase(Locale.ROOT));
    }

    String text() {
      return new String(body, StandardCharsets.UTF_8);
    }
  }

  /** A spinning client sleeps in {@code read} after this long without an answer. */
  private static final long SPIN_LIMIT_NANOS = 1_000_000_000L;

  private final String host;
  private final Socket socket;
  private final OutputStream out;
  private final InputStream in;
  private final boolean spin;

  KeepAliveClient(String host, int port) throws IOException {
    this(host, port, false);
  }

  /** @param spin poll for each response rather than sleep in {@code read} */
  KeepAliveClient(String host, int port, boolean spin) throws IOException {
    this.spin = spin;
    this.host = host + ":" + port;
    this.socket = new Socket();
    socket.setTcpNoDelay(true);
    socket.connect(new InetSocketAddress(host, port), 10_000);
    socket.setSoTimeout(300_000);
    this.out = new BufferedOutputStream(socket.getOutputStream(), 1 << 16);
    this.in = new BufferedInputStream(socket.getInputStream(), 1 << 16);
  }

  Response post(String path, String contentType, byte[] body) throws IOException {
    String head = "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: " + contentType
        + "\r\nContent-Length: " + body.length + "\r\n\r\n";
    out.write(head.getBytes(StandardCharsets.US_ASCII));
    out.write(body);
    out.flush();
    return read();
  }

  Response get(String path) throws IOException {
    out.write(("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
    out.flush();
    return read();
  }

  private Response read() throws IOException {
    if (spin) {
      // available() asks the socket (FIONREAD) once the buffer is empty; the read below then finds bytes waiting.
      long until = System.nanoTime() + SPIN_LIMIT_NANOS;
      while (in.available() == 0 && System.nanoTime() < until) {
        Thread.onSpinWait();
      }
    }
    String status = line();
    if (!status.startsWith("HTTP/1.1 ")) {
      throw new IOException("not an HTTP/1.1 status line: " + status);
    }
    int code = Integer.parseInt(status.substring(9, 12));
    Map<String, String> headers = new LinkedHashMap<>();
    for (String l = line(); !l.isEmpty(); l = line()) {
      int colon = l.indexOf(':');
      headers.put(l.substring(0, colon).trim().toLowerCase(Locale.ROOT), l.substring(colon + 1).trim());
    }
    String length = headers.get("content-length");
    if (length == null) {
      throw new IOException("a response without Content-Length (" + headers + ")");
    }
    byte[] body = in.readNBytes(Integer.parseInt(length));
    if (body.length != Integer.parseInt(length)) {
      throw new EOFException("the connection closed inside a body");
    }
    return new Response(code, headers, body);
  }

  private String line() throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream(128);
    for (int c = in.read(); c != '\n'; c = in.read()) {
      if (c < 0) {
        throw new EOFException("the server closed the connection");
      }
      if (c != '\r') {
        b.write(c);
      }
    }
    return b.toString(StandardCharsets.ISO_8859_1);
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}
