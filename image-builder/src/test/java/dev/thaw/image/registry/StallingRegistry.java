package dev.thaw.image.registry;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A registry on raw loopback sockets that stops sending, as one does when its process is stopped (SIGSTOP) or the
 * link behind a live proxy dies: the connection stays open and no byte more comes. It serves {@code paths} (HTTP/1.1,
 * kept alive) and, at {@code stallPath}, sends the head and the first {@code stallAfter} bytes of the body, then
 * nothing; with {@code stallPath} {@code "*"} it reads every request and answers none.
 */
final class StallingRegistry implements AutoCloseable {

  private final ServerSocket server;
  private final Map<String, byte[]> paths;
  private final String stallPath;
  private final int stallAfter;
  private final List<Socket> sockets = new CopyOnWriteArrayList<>();
  private final Thread acceptor;

  StallingRegistry(Map<String, byte[]> paths, String stallPath, int stallAfter) throws IOException {
    this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    this.paths = paths;
    this.stallPath = stallPath;
    this.stallAfter = stallAfter;
    this.acceptor = new Thread(this::accept, "stalling-registry");
    acceptor.setDaemon(true);
    acceptor.start();
  }

  String address() {
    return "127.0.0.1:" + server.getLocalPort();
  }

  private void accept() {
    while (!server.isClosed()) {
      try {
        Socket s = server.accept();
        sockets.add(s);
        Thread t = new Thread(() -> serve(s), "stalling-registry-connection");
        t.setDaemon(true);
        t.start();
      } catch (IOException e) {
        return;
      }
    }
  }

  private void serve(Socket s) {
    try (s; InputStream in = s.getInputStream(); OutputStream out = s.getOutputStream()) {
      while (true) {
        String requestLine = line(in);
        if (requestLine == null) {
          return;
        }
        while (!line(in).isEmpty()) {
          // Headers: nothing here needs them (no request this fake serves has a body).
        }
        String[] parts = requestLine.split(" ");
        String method = parts[0];
        String path = parts[1];
        if (stallPath.equals("*")) {
          stall();
        }
        byte[] body = paths.get(path);
        if (body == null) {
          out.write("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
          out.flush();
          continue;
        }
        String type = path.contains("/manifests/") ? ThawArtifact.OCI_MANIFEST : "application/octet-stream";
        out.write(("HTTP/1.1 200 OK\r\nContent-Type: " + type + "\r\nContent-Length: " + body.length + "\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII));
        if (method.equals("HEAD")) {
          out.flush();
          continue;
        }
        if (path.equals(stallPath)) {
          out.write(body, 0, Math.min(stallAfter, body.length));
          out.flush();
          stall();
        }
        out.write(body);
        out.flush();
      }
    } catch (IOException | InterruptedException e) {
      // The client gave up on this connection, or the fake closes.
    }
  }

  /** Sends nothing more until the fake closes. */
  private void stall() throws InterruptedException {
    while (!server.isClosed()) {
      Thread.sleep(50);
    }
    Thread.currentThread().interrupt();
  }

  /** One CRLF-ended line without its end, or null at the end of the stream. */
  private static String line(InputStream in) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    int c;
    while ((c = in.read()) != -1 && c != '\n') {
      if (c != '\r') {
        b.write(c);
      }
    }
    return c == -1 && b.size() == 0 ? null : b.toString(StandardCharsets.US_ASCII);
  }

  /** How many connections clients opened. */
  int connections() {
    return sockets.size();
  }

  @Override
  public void close() throws IOException {
    server.close();
    for (Socket s : sockets) {
      s.close();
    }
  }
}
