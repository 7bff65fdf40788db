package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Connections that never finish a request, against a real server on loopback with raw sockets: more of them than the
 * server's connection limit leave it no more open connections than the limit, a health check and an invoke still
 * answer, and every slow one is closed once its header deadline passes; a body that stops midway is answered 408
 * once its deadline passes.
 */
class ConnectionLimitsTest {

  static final int LIMIT = 32;
  static final int SLOW = 3 * LIMIT;
  static final String EVICTED = "thaw_http_connections_closed_total\\{[^}]*reason=\"evicted\"[^}]*\\}";

  @TempDir
  Path dir;

  @Test
  void slowConnectionsBeyondTheLimitLeaveHealthAndInvokesAnsweringAndAreClosedAtTheirDeadline() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.buildMlp(store, "mlp:1");
      ServerOptions options = new ServerOptions().setPort(0).setMaxConnections(LIMIT)
          .setHeaderTimeout(Duration.ofSeconds(1)).setBodyTimeout(Duration.ofSeconds(1))
          .addFunction("mlp", new FunctionOptions().setImage("mlp:1"));
      try (ThawServer server = ThawServer.start(options, store, new InProcessInstances(driver, store))) {
        int port = server.port();
        assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
        List<Socket> slow = new ArrayList<>();
        try {
          for (int i = 0; i < SLOW; i++) {
            Socket s = new Socket("127.0.0.1", port);
            s.getOutputStream().write("GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: ".getBytes(
                StandardCharsets.US_ASCII));
            s.getOutputStream().flush();
            slow.add(s);
          }
          // The server reads them in batches: once it has seen all, the oldest slow ones made room for the rest.
          String metrics = "";
          for (int i = 0; i < 1000; i++) {
            metrics = get(port, "/metrics").body();
            if (gauge(metrics, EVICTED) >= SLOW - LIMIT) {
              break;
            }
            Thread.sleep(10);
          }
          assertTrue(gauge(metrics, EVICTED) >= SLOW - LIMIT, metrics);
          assertTrue(gauge(metrics, "thaw_http_connections") <= LIMIT, metrics);
          HttpResponse<String> health = get(port, "/v2/health/live");
          assertEquals(200, health.statusCode(), health.body());
          HttpResponse<String> invoke = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
          assertEquals(200, invoke.statusCode(), invoke.body());

          // Every slow connection is closed by the server: made room for, or at its header deadline.
          long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
          for (Socket s : slow) {
            s.setSoTimeout((int) Math.max(1, (deadline - System.nanoTime()) / 1_000_000));
            assertEquals(-1, readToEnd(s.getInputStream()), "the server closed it");
          }
        } finally {
          for (Socket s : slow) {
            s.close();
          }
        }

        // A body that stops midway: 408 once the body deadline passes, and the connection closed.
        try (Socket s = new Socket("127.0.0.1", port)) {
          OutputStream out = s.getOutputStream();
          out.write(("POST /v1/functions/mlp/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + "Content-Length: 100\r\n\r\n{\"inputs\": ").getBytes(StandardCharsets.US_ASCII));
          out.flush();
          s.setSoTimeout(20_000);
          String reply = new String(s.getInputStream().readAllBytes(), StandardCharsets.US_ASCII);
          assertTrue(reply.startsWith("HTTP/1.1 408"), reply);
          assertTrue(reply.contains("\"code\":\"body_timeout\""), reply);
        }
        assertEquals(200, get(port, "/v2/health/ready").statusCode());
      }
    }
  }

  @Test
  void theLimitsHaveAJsonFormAndRefuseNonsense() {
    ServerOptions o = ServerOptions.fromJson(ServerFixture.JSON.createObjectNode().put("maxConnections", 100)
        .put("headerTimeout", "5s").put("bodyTimeout", "250ms").put("idleTimeout", "2m"));
    assertEquals(100, o.maxConnections());
    assertEquals(Duration.ofSeconds(5), o.headerTimeout());
    assertEquals(Duration.ofMillis(250), o.bodyTimeout());
    assertEquals(Duration.ofMinutes(2), o.idleTimeout());
    ServerOptions back = ServerOptions.fromJson(o.toJson());
    assertEquals(List.of(100, o.headerTimeout(), o.bodyTimeout(), o.idleTimeout()),
        List.of(back.maxConnections(), back.headerTimeout(), back.bodyTimeout(), back.idleTimeout()));
    assertEquals(4096, new ServerOptions().maxConnections());
    assertThrows(IllegalArgumentException.class, () -> new ServerOptions().setMaxConnections(0));
    assertThrows(IllegalArgumentException.class, () -> new ServerOptions().setHeaderTimeout(Duration.ofMillis(10)));
    assertThrows(IllegalArgumentException.class, () -> new ServerOptions().setBodyTimeout(Duration.ofHours(2)));
  }

  /** Reads until the end of the stream; -1 there, or fails on the socket's timeout. */
  private static int readToEnd(InputStream in) throws Exception {
    try {
      while (in.read() >= 0) {
        // A server closing a connection whose head never came sends nothing first; anything is read past.
      }
      return -1;
    } catch (SocketTimeoutException e) {
      throw new AssertionError("the server kept a slow connection open past its deadline", e);
    } catch (SocketException e) {
      return -1; // reset: closed all the same
    }
  }

  private static double gauge(String metrics, String name) {
    Matcher m = Pattern.compile("(?m)^" + name + "(\\{[^}]*\\})? ([0-9.eE+]+)$").matcher(metrics);
    double sum = 0;
    boolean found = false;
    while (m.find()) {
      sum += Double.parseDouble(m.group(2));
      found = true;
    }
    assertTrue(found, name + " in /metrics");
    return sum;
  }
}
