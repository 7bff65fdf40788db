package dev.thaw.cli;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.server.GateFunction;
import dev.thaw.server.ServerFixture;
import java.io.IOException;
import java.net.ConnectException;
import java.net.ServerSocket;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code thaw serve} as a child process, started the way a kubelet starts a Knative container: {@code $PORT} and
 * the {@code K_*} variables in the environment, readiness probed on {@code /v2/health/ready}, SIGTERM to stop.
 */
class ServeCommandTest {

  @TempDir
  Path dir;

  Process child;
  Path log;

  @BeforeEach
  void images() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"))) {
      ServerFixture.buildMlp(store, "mlp:1");
      ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 64L << 20);
    }
  }

  @AfterEach
  void kill() throws Exception {
    if (log != null) {
      System.out.println(read());
    }
    if (child != null && child.isAlive()) {
      child.destroyForcibly().waitFor(30, TimeUnit.SECONDS);
    }
  }

  private int start(Map<String, String> env, String... args) throws IOException {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    List<String> command = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElse("java"), "-Xmx256m",
        "-cp", System.getProperty("java.class.path"), ThawCli.class.getName(), "serve", "--device", "sim"));
    command.addAll(List.of(args));
    ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
    log = dir.resolve("serve.log");
    pb.redirectOutput(log.toFile());
    pb.environment().put("PORT", Integer.toString(port));
    pb.environment().put("THAW_STORE", dir.resolve("store").toString());
    pb.environment().putAll(env);
    child = pb.start();
    return port;
  }

  /** Polls readiness as a kubelet does, until 200. */
  private void awaitReady(int port) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (System.nanoTime() < deadline) {
      assertTrue(child.isAlive(), () -> "thaw serve exited: " + read());
      try {
        if (get(port, "/v2/health/ready").statusCode() == 200) {
          return;
        }
      } catch (ConnectException notYet) {
        // Not listening yet.
      }
      Thread.sleep(50);
    }
    throw new AssertionError("never ready: " + read());
  }

  private String read() {
    try {
      return Files.readString(log);
    } catch (IOException e) {
      return e.toString();
    }
  }

  private static Map<String, Long> files(Path root) throws IOException {
    Map<String, Long> m = new TreeMap<>();
    try (Stream<Path> s = Files.walk(root)) {
      for (Path p : s.filter(Files::isRegularFile).toList()) {
        m.put(root.relativize(p).toString(), Files.getLastModifiedTime(p).toMillis() ^ Files.size(p));
      }
    }
    return m;
  }

  @Test
  void underKnativeItServesOnPortLabelsLogsAndMetricsWritesNothingToTheStoreAndDrainsOnSigterm() throws Exception {
    Map<String, Long> before = files(dir.resolve("store"));
    int port = start(Map.of("K_SERVICE", "mlp-svc", "K_REVISION", "mlp-svc-00001", "K_CONFIGURATION", "mlp-svc"),
        "--function", "mlp=mlp:1", "--function", "gate=gate:1");
    awaitReady(port);

    HttpResponse<String> cold = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(200, cold.statusCode(), cold.body());
    assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());
    String metrics = get(port, "/metrics").body();
    assertTrue(metrics.contains("service=\"mlp-svc\"") && metrics.contains("revision=\"mlp-svc-00001\"")
        && metrics.contains("configuration=\"mlp-svc\""), "K_* labels on metrics");
    List<String> unlabelled = metrics.lines().filter(l -> l.startsWith("thaw_"))
        .filter(l -> !l.contains("service=\"mlp-svc\"")).toList();
    assertTrue(metrics.contains("thaw_pool_workers{") && unlabelled.isEmpty(),
        "every one of Thaw's metrics, the pool's gauges too, carries the K_* labels: " + unlabelled);

    // A request in flight when SIGTERM comes finishes; then the process exits 0.
    CompletableFuture<HttpResponse<String>> inFlight = ServerFixture.background(
        () -> postJson(port, "/v1/functions/gate/invoke", "{\"sleepMillis\": 1500}"));
    awaitBusy(port, "gate");
    child.destroy();
    HttpResponse<String> held = inFlight.get(30, TimeUnit.SECONDS);
    assertEquals(200, held.statusCode(), held.body());
    assertTrue(child.waitFor(30, TimeUnit.SECONDS), "exits within the drain deadline");
    assertEquals(0, child.exitValue(), read());
    String out = read();
    assertTrue(out.contains("listening on http://127.0.0.1:" + port), out);
    assertTrue(out.contains("store    " + dir.resolve("store") + " (read-only)"), out);
    assertTrue(out.contains("POST /v1/functions/mlp/invoke 200") && out.contains("mlp cold queue="), out);
    assertTrue(out.contains("service=mlp-svc revision=mlp-svc-00001 configuration=mlp-svc"), out);
    assertTrue(out.contains("drained; bye"), out);
    assertEquals(before, files(dir.resolve("store")), "the store is only read under Knative");
  }

  /**
   * The way from process start to the first response, as a kubelet's first request sees it (the invoke polled until
   * it answers): one line in the log at the first response, with the server's own steps, the first worker's start-up
   * and the request's phases; never again after.
   */
  @Test
  void theStartupTimelineIsLoggedOnceAtTheFirstResponse() throws Exception {
    int port = start(Map.of(), "--function", "mlp=mlp:1");
    firstResponse(port);
    assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
    String line = startupLine();
    for (String step : List.of("from process start to first response (mlp)", "main ", "options ", "pool started ",
        "store ", "driver ", "vertx ", "registered ", "listening ", "instance started ", "first response ",
        "; worker spawn to ready ", " jvm ", " context ", " restoreResources ", "; instance start ms:",
        " map allocations ", "; first request ms:", " queue ", " acquire ", " invoke ")) {
      assertTrue(line.contains(step), "'" + step + "' in " + line);
    }
  }

  @Test
  void inProcessTheTimelineShowsTheContextMadeBesideTheServer() throws Exception {
    int port = start(Map.of(), "--function", "mlp=mlp:1", "--instances", "in-process");
    firstResponse(port);
    String line = startupLine();
    for (String step : List.of("first response (mlp)", "driver ", " context ", "restore resources ", "image prepared ",
        "listening ",
        "instance started ", "; instance start ms: context ", " restore ", "; first request ms:")) {
      assertTrue(line.contains(step), "'" + step + "' in " + line);
    }
  }

  /** Posts the MLP request until it is answered, as the GPU script measures a start. */
  private void firstResponse(int port) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
    while (System.nanoTime() < deadline) {
      assertTrue(child.isAlive(), () -> "thaw serve exited: " + read());
      try {
        HttpResponse<String> r = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        if (r.statusCode() == 200) {
          return;
        }
      } catch (ConnectException notYet) {
        // Not listening yet.
      }
      Thread.sleep(20);
    }
    throw new AssertionError("never answered: " + read());
  }

  /** The one startup line of the log, waited for: the request log is written after the response. */
  private String startupLine() throws Exception {
    for (int i = 0; i < 500; i++) {
      List<String> lines = read().lines().filter(l -> l.contains(" startup ")).toList();
      if (!lines.isEmpty()) {
        Thread.sleep(200);
        lines = read().lines().filter(l -> l.contains(" startup ")).toList();
        assertEquals(1, lines.size(), "one startup line: " + read());
        return lines.get(0);
      }
      Thread.sleep(20);
    }
    throw new AssertionError("no startup line: " + read());
  }

  @Test
  void anUnknownImageExitsFourAsOnEveryCommandAndNothingListens() throws Exception {
    start(Map.of(), "--function", "mlp=none:1");
    assertTrue(child.waitFor(60, TimeUnit.SECONDS));
    assertEquals(ThawCli.EXIT_NOT_FOUND, child.exitValue(), read());
    assertTrue(read().contains("function 'mlp'") && read().contains("none:1"), read());
  }

  private static void awaitBusy(int port, String function) throws Exception {
    for (int i = 0; i < 1000; i++) {
      if (json(get(port, "/v1/functions/" + function)).toString().contains("\"state\":\"busy\"")) {
        return;
      }
      Thread.sleep(10);
    }
    throw new AssertionError(function + " never got busy");
  }
}
