package dev.thaw.server.impl;

import dev.thaw.runtime.host.Threads;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;

/**
 * Two requests a server sends itself over loopback once it listens, so that the first client's request does not pay
 * for the HTTP path's first use (Netty's codec, the router, the body handler, the name check, Jackson's request parse,
 * the scheduler's lookup, an error's encoding), which would otherwise stand between "listening" and a
 * scale-from-zero's first request reaching the scheduler ({@code docs/design/server.md}). A health check, then an invoke of a function no one registered (a random
 * name: a 404), on one kept-alive connection. They carry a per-server nonce in {@value #HEADER} and the request log
 * leaves them out. Best effort: a server that closes first, or a port that does not answer, ends it quietly.
 */
final class HttpWarmup {

  static final String HEADER = "Thaw-Warmup";

  private final String nonce;

  HttpWarmup() {
    byte[] b = new byte[16];
    new SecureRandom().nextBytes(b);
    this.nonce = HexFormat.of().formatHex(b);
  }

  /** True for a request this warm-up sent. */
  boolean isOwn(String headerValue) {
    return nonce.equals(headerValue);
  }

  /** Sends the requests to {@code host:port} on a thread of its own; completes with the statuses, e.g. "200 404". */
  CompletableFuture<String> start(String host, int port) {
    return start(() -> {
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress(host, port), 2000);
        s.setSoTimeout(5000);
        s.setTcpNoDelay(true);
        return run(s.getOutputStream(), s.getInputStream());
      }
    });
  }

  /** As {@link #start(String, int)}, over the Unix domain socket at {@code socket}. */
  CompletableFuture<String> start(Path socket) {
    return start(() -> {
      try (SocketChannel s = SocketChannel.open(UnixDomainSocketAddress.of(socket))) {
        return run(Channels.newOutputStream(s), Channels.newInputStream(s));
      }
    });
  }

  private interface Exchange {
    String run() throws IOException;
  }

  private CompletableFuture<String> start(Exchange exchange) {
    CompletableFuture<String> done = new CompletableFuture<>();
    Threads.startDaemon(() -> {
      try {
        done.complete(exchange.run());
      } catch (IOException | RuntimeException e) {
        done.complete("not run: " + e.getMessage());
      }
    }, "thaw-http-warmup");
    return done;
  }

  private String run(OutputStream out, InputStream in) throws IOException {
    byte[] raw = new byte[8];
    new SecureRandom().nextBytes(raw);
    String function = "warmup-" + HexFormat.of().formatHex(raw);
    String body = "{\"inputs\": [[0.5, -1.5, 2.0]], \"maxNewTokens\": 1}";
    String first = exchange(out, in, "GET /v2/health/ready HTTP/1.1\r\nHost: warmup\r\n" + HEADER + ": " + nonce
        + "\r\n\r\n");
    String second = exchange(out, in, "POST /v1/functions/" + function + "/invoke HTTP/1.1\r\nHost: warmup\r\n"
        + HEADER + ": " + nonce + "\r\nContent-Type: application/json\r\nContent-Length: "
        + body.getBytes(StandardCharsets.UTF_8).length + "\r\n\r\n" + body);
    return first + " " + second;
  }

  /** Writes one request and reads its response (status line, headers, a Content-Length body): its status. */
  private static String exchange(OutputStream out, InputStream in, String request) throws IOException {
    out.write(request.getBytes(StandardCharsets.UTF_8));
    out.flush();
    String status = line(in);
    long length = 0;
    for (String h = line(in); !h.isEmpty(); h = line(in)) {
      int colon = h.indexOf(':');
      if (colon > 0 && h.substring(0, colon).trim().toLowerCase(Locale.ROOT).equals("content-length")) {
        length = Long.parseLong(h.substring(colon + 1).trim());
      }
    }
    in.skipNBytes(length);
    String[] parts = status.split(" ");
    return parts.length > 1 ? parts[1] : status;
  }

  private static String line(InputStream in) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream(64);
    int c;
    while ((c = in.read()) != -1 && c != '\n') {
      if (c != '\r') {
        b.write(c);
      }
    }
    if (c == -1 && b.size() == 0) {
      throw new IOException("the server closed the connection");
    }
    return b.toString(StandardCharsets.ISO_8859_1);
  }
}
