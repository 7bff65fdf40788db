package dev.thaw.server;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * A client of server-sent events over a plain socket, so that a test decides exactly when it reads and when it
 * leaves (closing the socket is a client gone mid-stream): one POST, its status and headers, then its events one at
 * a time as the chunked body brings them. Reads wait at most 60 s.
 */
final class SseClient implements AutoCloseable {

  private final Socket socket;
  private final InputStream in;
  final int status;
  final Map<String, String> headers = new LinkedHashMap<>();
  private final StringBuilder pending = new StringBuilder();
  private boolean ended;

  private SseClient(int port, String path, String body) throws IOException {
    socket = new Socket("127.0.0.1", port);
    socket.setSoTimeout(60_000);
    byte[] b = body.getBytes(StandardCharsets.UTF_8);
    OutputStream out = socket.getOutputStream();
    out.write(("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
        + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
    out.write(b);
    out.flush();
    in = socket.getInputStream();
    String statusLine = line();
    status = Integer.parseInt(statusLine.split(" ")[1]);
    for (String h = line(); !h.isEmpty(); h = line()) {
      int colon = h.indexOf(':');
      headers.put(h.substring(0, colon).trim().toLowerCase(Locale.ROOT), h.substring(colon + 1).trim());
    }
  }

  static SseClient post(int port, String path, String body) throws IOException {
    return new SseClient(port, path, body);
  }

  /** The next event's data ({@code data: } dropped), or null once the body ended. */
  String next() throws IOException {
    while (true) {
      int end = pending.indexOf("\n\n");
      if (end >= 0) {
        String event = pending.substring(0, end);
        pending.delete(0, end + 2);
        return event.startsWith("data: ") ? event.substring(6) : event;
      }
      if (ended || !chunk()) {
        return null;
      }
    }
  }

  /** The whole body of a response that is not chunked (an error), as text. */
  String body() throws IOException {
    int n = Integer.parseInt(headers.getOrDefault("content-length", "0"));
    return new String(in.readNBytes(n), StandardCharsets.UTF_8);
  }

  /** Reads one chunk of the chunked body into {@link #pending}; false at the last. */
  private boolean chunk() throws IOException {
    String size = line();
    int n = Integer.parseInt(size.split(";")[0].trim(), 16);
    if (n == 0) {
      line();
      ended = true;
      return false;
    }
    pending.append(new String(in.readNBytes(n), StandardCharsets.UTF_8));
    line();
    return true;
  }

  private String line() throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    int c;
    while ((c = in.read()) >= 0 && c != '\n') {
      if (c != '\r') {
        b.write(c);
      }
    }
    if (c < 0 && b.size() == 0) {
      throw new IOException("the connection ended");
    }
    return b.toString(StandardCharsets.UTF_8);
  }

  /** Leaves: the connection closes under the server's stream. */
  @Override
  public void close() throws IOException {
    socket.close();
  }
}
