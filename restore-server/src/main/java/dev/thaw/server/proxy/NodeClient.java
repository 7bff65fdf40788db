package dev.thaw.server.proxy;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ConcurrentLinkedDeque;

/**
 * HTTP/1.1 to the node server over its Unix domain socket, on kept-alive connections: what the function proxy
 * forwards its requests through. JDK only (no HTTP library loads), since the proxy's start time is its reason to be.
 *
 * <p>A request's body is sent with {@code Content-Length} when its length is known, else chunked; a response's body is
 * read as its head frames it ({@code Content-Length}, chunked, or up to the connection's end). A connection goes back
 * to the pool only when its response was read to its end and the server did not ask to close it. A request sent on a
 * pooled connection that the server had closed meanwhile is sent again on a new one, when its body can be sent again.
 *
 * <p>Thread-safe; each exchange uses its connection alone.
 */
final class NodeClient implements AutoCloseable {

  /** Idle connections kept for the next requests. */
  static final int MAX_IDLE = 64;
  /** A pooled connection idle longer than this is not used (the server closes idle ones after 120 s). */
  static final long MAX_IDLE_NANOS = 60_000_000_000L;
  private static final int MAX_HEAD_BYTES = 64 << 10;

  private final Path socket;
  private final ConcurrentLinkedDeque<Connection> idle = new ConcurrentLinkedDeque<>();
  private volatile boolean closed;

  NodeClient(Path socket) {
    this.socket = socket;
  }

  Path socket() {
    return socket;
  }

  /** A request: method, target (path and query, as sent), headers, and a body of a known length or none. */
  record Request(String method, String target, List<String[]> headers, byte[] body) {}

  /**
   * Sends a request whose whole body is in memory (or none) and returns the response, its body not read yet.
   *
   * @throws IOException when the server cannot be reached or the exchange fails
   */
  Response send(Request request) throws IOException {
    return send(request.method(), request.target(), request.headers(), request.body(), null, request.body().length);
  }

  /**
   * Sends a request whose body is {@code head} followed by what {@code rest} holds ({@code length} bytes in all, or
   * -1 when unknown: then chunked), and returns the response, its body not read yet.
   */
  Response send(String method, String target, List<String[]> headers, byte[] head, InputStream rest, long length)
      throws IOException {
    for (int attempt = 0; ; attempt++) {
      Connection c = borrow();
      boolean pooled = c.pooled;
      try {
        c.writeRequest(method, target, headers, head, rest, length);
        return c.readResponse(method);
      } catch (IOException e) {
        c.close();
        // A pooled connection the server closed while it was idle fails at once: send again on a new one, when the
        // whole body is still ours to send.
        if (pooled && rest == null && attempt == 0 && !c.answered) {
          continue;
        }
        throw e;
      }
    }
  }

  private Connection borrow() throws IOException {
    if (closed) {
      throw new IOException("the proxy is closing");
    }
    long now = System.nanoTime();
    for (Connection c = idle.pollFirst(); c != null; c = idle.pollFirst()) {
      if (now - c.idleSince < MAX_IDLE_NANOS && c.channel.isOpen()) {
        c.pooled = true;
        return c;
      }
      c.close();
    }
    return new Connection(SocketChannel.open(UnixDomainSocketAddress.of(socket)));
  }

  private void giveBack(Connection c) {
    if (closed || idle.size() >= MAX_IDLE) {
      c.close();
      return;
    }
    c.idleSince = System.nanoTime();
    c.answered = false;
    idle.addFirst(c);
  }

  @Override
  public void close() {
    closed = true;
    for (Connection c = idle.pollFirst(); c != null; c = idle.pollFirst()) {
      c.close();
    }
  }

  /** A response: its status and head; its body read through {@link #body()}; closing it frees the connection. */
  final class Response implements Closeable {
    private final Connection connection;
    final int status;
    final List<String[]> headers;
    private final InputStream body;
    private final long length;
    private final boolean reusable;
    private boolean done;

    Response(Connection connection, int status, List<String[]> headers, InputStream body, long length,
        boolean reusable) {
      this.connection = connection;
      this.status = status;
      this.headers = headers;
      this.body = body;
      this.length = length;
      this.reusable = reusable;
    }

    /** The first value of header {@code name} (any case), or null. */
    String header(String name) {
      return NodeClient.header(headers, name);
    }

    /** The body's length from {@code Content-Length}, 0 for none, -1 when it is chunked or ends with the connection. */
    long length() {
      return length;
    }

    InputStream body() {
      return body;
    }

    /** The whole body, at most {@code max} bytes (the rest is read and dropped). */
    byte[] readAll(int max) throws IOException {
      byte[] b = body.readNBytes(max);
      body.transferTo(OutputStream.nullOutputStream());
      return b;
    }

    String text() throws IOException {
      return new String(readAll(64 << 10), StandardCharsets.UTF_8);
    }

    /** Gives the connection back when the body was read to its end; else closes it. */
    @Override
    public void close() {
      if (done) {
        return;
      }
      done = true;
      boolean atEnd;
      try {
        atEnd = reusable && body.read() == -1;
      } catch (IOException e) {
        atEnd = false;
      }
      if (atEnd) {
        giveBack(connection);
      } else {
        connection.close();
      }
    }
  }

  static String header(List<String[]> headers, String name) {
    for (String[] h : headers) {
      if (h[0].equalsIgnoreCase(name)) {
        return h[1];
      }
    }
    return null;
  }

  /** One connection to the socket, with its buffered streams. */
  private final class Connection {
    final SocketChannel channel;
    final InputStream in;
    final OutputStream out;
    long idleSince;
    boolean pooled;
    /** Set once a byte of the response came: the request reached the server. */
    boolean answered;

    Connection(SocketChannel channel) {
      this.channel = channel;
      this.in = new BufferedInputStream(Channels.newInputStream(channel), 16 << 10);
      this.out = new BufferedOutputStream(Channels.newOutputStream(channel), 16 << 10);
    }

    void writeRequest(String method, String target, List<String[]> headers, byte[] head, InputStream rest,
        long length) throws IOException {
      StringBuilder h = new StringBuilder(256);
      h.append(method).append(' ').append(target).append(" HTTP/1.1\r\nHost: thaw\r\n");
      for (String[] x : headers) {
        h.append(x[0]).append(": ").append(x[1]).append("\r\n");
      }
      boolean chunked = length < 0;
      if (chunked) {
        h.append("Transfer-Encoding: chunked\r\n");
      } else if (length > 0 || method.equals("POST") || method.equals("PUT")) {
        h.append("Content-Length: ").append(length).append("\r\n");
      }
      h.append("\r\n");
      out.write(h.toString().getBytes(StandardCharsets.ISO_8859_1));
      if (chunked) {
        writeChunk(head, head.length);
        byte[] buf = new byte[16 << 10];
        for (int n = rest == null ? -1 : rest.read(buf); n >= 0; n = rest.read(buf)) {
          writeChunk(buf, n);
        }
        out.write("0\r\n\r\n".getBytes(StandardCharsets.ISO_8859_1));
      } else {
        out.write(head);
        long left = length - head.length;
        if (rest != null && left > 0) {
          byte[] buf = new byte[16 << 10];
          while (left > 0) {
            int n = rest.read(buf, 0, (int) Math.min(buf.length, left));
            if (n < 0) {
              throw new EOFException("the request's body ended " + left + " bytes early");
            }
            out.write(buf, 0, n);
            left -= n;
          }
        }
      }
      out.flush();
    }

    private void writeChunk(byte[] b, int n) throws IOException {
      if (n > 0) {
        out.write((Integer.toHexString(n) + "\r\n").getBytes(StandardCharsets.ISO_8859_1));
        out.write(b, 0, n);
        out.write("\r\n".getBytes(StandardCharsets.ISO_8859_1));
      }
    }

    Response readResponse(String method) throws IOException {
      String statusLine = line();
      answered = true;
      String[] parts = statusLine.split(" ", 3);
      if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
        throw new IOException("not an HTTP/1.1 response: " + statusLine);
      }
      int status;
      try {
        status = Integer.parseInt(parts[1]);
      } catch (NumberFormatException e) {
        throw new IOException("not an HTTP status: " + statusLine, e);
      }
      List<String[]> headers = new ArrayList<>();
      int headBytes = statusLine.length();
      for (String l = line(); !l.isEmpty(); l = line()) {
        headBytes += l.length();
        if (headBytes > MAX_HEAD_BYTES) {
          throw new IOException("the response's head passes " + MAX_HEAD_BYTES + " bytes");
        }
        int colon = l.indexOf(':');
        if (colon > 0) {
          headers.add(new String[] {l.substring(0, colon).trim(), l.substring(colon + 1).trim()});
        }
      }
      boolean keepAlive = !"close".equalsIgnoreCase(header(headers, "Connection"))
          && !statusLine.startsWith("HTTP/1.0");
      String te = header(headers, "Transfer-Encoding");
      String cl = header(headers, "Content-Length");
      if (method.equals("HEAD") || status / 100 == 1 || status == 204 || status == 304) {
        return new Response(this, status, headers, InputStream.nullInputStream(), 0, keepAlive);
      }
      if (te != null && te.toLowerCase(Locale.ROOT).contains("chunked")) {
        return new Response(this, status, headers, new ChunkedInput(in), -1, keepAlive);
      }
      if (cl != null) {
        long n;
        try {
          n = Long.parseLong(cl);
        } catch (NumberFormatException e) {
          throw new IOException("bad Content-Length: " + cl, e);
        }
        return new Response(this, status, headers, new BoundedInput(in, n), n, keepAlive);
      }
      return new Response(this, status, headers, in, -1, false);
    }

    private String line() throws IOException {
      ByteArrayOutputStream b = new ByteArrayOutputStream(64);
      int c;
      while ((c = in.read()) != -1 && c != '\n') {
        if (c != '\r') {
          b.write(c);
        }
        if (b.size() > MAX_HEAD_BYTES) {
          throw new IOException("a response line passes " + MAX_HEAD_BYTES + " bytes");
        }
      }
      if (c == -1) {
        throw new EOFException("the node server closed the connection");
      }
      return b.toString(StandardCharsets.ISO_8859_1);
    }

    void close() {
      try {
        channel.close();
      } catch (IOException e) {
        // Closing anyway.
      }
    }
  }

  /** The next {@code n} bytes of a stream. */
  private static final class BoundedInput extends InputStream {
    private final InputStream in;
    private long left;

    BoundedInput(InputStream in, long n) {
      this.in = in;
      this.left = n;
    }

    @Override
    public int read() throws IOException {
      if (left <= 0) {
        return -1;
      }
      int c = in.read();
      if (c < 0) {
        throw new EOFException("the node server's response ended " + left + " bytes early");
      }
      left--;
      return c;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (left <= 0) {
        return -1;
      }
      int n = in.read(b, off, (int) Math.min(len, left));
      if (n < 0) {
        throw new EOFException("the node server's response ended " + left + " bytes early");
      }
      left -= n;
      return n;
    }
  }

  /**
   * A chunked body, decoded. {@link #available()} is what is left of the current chunk, so a reader can pass each
   * chunk on as it arrives (server-sent events).
   */
  static final class ChunkedInput extends InputStream {
    private final InputStream in;
    private long left;
    private boolean end;

    ChunkedInput(InputStream in) {
      this.in = in;
    }

    private boolean next() throws IOException {
      if (end) {
        return false;
      }
      if (left == 0) {
        String size = line();
        int semi = size.indexOf(';');
        try {
          left = Long.parseLong((semi < 0 ? size : size.substring(0, semi)).trim(), 16);
        } catch (NumberFormatException e) {
          throw new IOException("bad chunk size: " + size, e);
        }
        if (left == 0) {
          for (String trailer = line(); !trailer.isEmpty(); trailer = line()) {
            // Trailers are dropped.
          }
          end = true;
          return false;
        }
      }
      return true;
    }

    @Override
    public int read() throws IOException {
      byte[] one = new byte[1];
      return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (!next()) {
        return -1;
      }
      int n = in.read(b, off, (int) Math.min(len, left));
      if (n < 0) {
        throw new EOFException("the node server's chunked response ended early");
      }
      left -= n;
      if (left == 0) {
        line();
      }
      return n;
    }

    @Override
    public int available() {
      return (int) Math.min(Integer.MAX_VALUE, left);
    }

    private String line() throws IOException {
      StringBuilder b = new StringBuilder();
      int c;
      while ((c = in.read()) != -1 && c != '\n') {
        if (c != '\r') {
          b.append((char) c);
        }
        if (b.length() > 4096) {
          throw new IOException("a chunk line passes 4096 bytes");
        }
      }
      if (c == -1) {
        throw new EOFException("the node server's chunked response ended early");
      }
      return b.toString();
    }
  }
}
