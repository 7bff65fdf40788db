package dev.thaw.cli;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.registry.ImagePusher;
import dev.thaw.image.registry.RegistryOptions;
import dev.thaw.image.registry.TestRegistry;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.server.GateFunction;
import dev.thaw.server.ServerFixture;
import dev.thaw.server.TenantLimits;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.ConnectException;
import java.net.ServerSocket;
import java.net.UnixDomainSocketAddress;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Node mode end to end with real processes, started the way a kubelet starts them: one node server ({@code thaw
 * serve --socket}, pool-backed, the sim device) and function pods ({@code thaw proxy}) for different tenants, each on
 * its own loopback {@code $PORT} with Knative's {@code K_*} variables and its tenant key, probed for readiness,
 * stopped with SIGTERM. Images come from a real registry on loopback (Debian's docker-registry; the class is skipped,
 * saying why, where it cannot run). Pinned: each proxy serves its own function and nothing else; a tenant cannot
 * reach, take or see another's function; each layer scales to zero and back (the server's instance after its
 * keep-alive, the proxy pod by SIGTERM, a new one registering again without a second pull); SIGTERM lets a request
 * in flight finish; a pull that fails is a clear error, never a hang.
 */
class NodeModeTest {

  static final String KEY_A = "tenant-a-key-0123456789";
  static final String KEY_B = "tenant-b-key-0123456789";
  static final String ADMIN = "node-admin-token-0123456789";

  @TempDir
  static Path dir;

  static TestRegistry registry;
  static Path socket;
  static Child node;
  static int nodePort;
  static String mlpRef;
  static String gateRef;

  @BeforeAll
  static void startNode() throws Exception {
    registry = TestRegistry.start(dir.resolve("registry"), null);
    try (RocksChunkStore built = ServerFixture.openStore(dir.resolve("built"))) {
      ServerFixture.buildMlp(built, "mlp:1");
      ServerFixture.build(built, "gate:1", GateFunction.class.getName(), "{}", null, 64L << 20);
      ImagePusher pusher = new ImagePusher(new RegistryOptions());
      mlpRef = pusher.push(built, "mlp:1", registry.reference("thaw/mlp:1")).reference();
      gateRef = pusher.push(built, "gate:1", registry.reference("thaw/gate:1")).reference();
    }
    socket = dir.resolve("run/thaw.sock");
    nodePort = freePort();
    // The node runs the test's gate function for tenants too, besides its inference functions.
    List<String> functions = new ArrayList<>(TenantLimits.DEFAULT_FUNCTIONS);
    functions.add(GateFunction.class.getName());
    Path config = Files.writeString(dir.resolve("node.json"), new TenantLimits().setFunctions(functions).toJson()
        .toString().transform(t -> "{\"tenants\": " + t + "}"));
    // The node server as its DaemonSet runs it, on a store of its own that does not exist yet.
    node = Child.start(dir.resolve("node.log"), Map.of("THAW_ADMIN_TOKEN", ADMIN), "serve", "--device", "sim",
        "--socket", socket.toString(), "--port", Integer.toString(nodePort), "--store",
        dir.resolve("node-store").toString(), "--idle-workers", "1", "--host-cache", "64m", "--config",
        config.toString());
    node.awaitLine("listening on", 120);
  }

  @AfterAll
  static void stopNode() throws Exception {
    if (node != null) {
      node.stop();
      System.out.println(node.log());
    }
    if (registry != null) {
      registry.close();
    }
  }

  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  /** A function pod: {@code thaw proxy} with Knative's environment, its own port and its tenant's key. */
  static Child proxy(String name, String reference, String key, String... more) throws Exception {
    int port = freePort();
    List<String> args = new ArrayList<>(List.of("proxy", "--socket", socket.toString(), "--function",
        name + "=" + reference));
    args.addAll(List.of(more));
    Child c = Child.start(dir.resolve("proxy-" + name + "-" + port + ".log"), Map.of("PORT", Integer.toString(port),
        "K_SERVICE", name, "K_REVISION", name + "-00001", "K_CONFIGURATION", name, "THAW_FUNCTION_KEY", key),
        args.toArray(String[]::new));
    c.port = port;
    return c;
  }

  /** Probes readiness as a kubelet does, every 50 ms, until 200. */
  static void awaitReady(Child c) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
    String last = "";
    while (System.nanoTime() < deadline) {
      assertTrue(c.process.isAlive(), () -> "the proxy exited: " + c.log());
      try {
        HttpResponse<String> r = get(c.port, "/v2/health/ready");
        if (r.statusCode() == 200) {
          return;
        }
        last = r.body();
      } catch (ConnectException notYet) {
        // Not listening yet.
      }
      Thread.sleep(50);
    }
    throw new AssertionError("never ready: " + last + "\n" + c.log() + "\n" + node.log());
  }

  /** One request to the node server's socket, as a pod could send it: status and body. */
  static String[] unix(String method, String path, String body, String... headers) throws IOException {
    StringBuilder h = new StringBuilder(method + " " + path + " HTTP/1.1\r\nHost: thaw\r\nConnection: close\r\n");
    for (int i = 0; i < headers.length; i += 2) {
      h.append(headers[i]).append(": ").append(headers[i + 1]).append("\r\n");
    }
    byte[] b = body == null ? new byte[0] : body.getBytes(StandardCharsets.UTF_8);
    if (body != null) {
      h.append("Content-Type: application/json\r\nContent-Length: ").append(b.length).append("\r\n");
    }
    h.append("\r\n");
    try (SocketChannel ch = SocketChannel.open(UnixDomainSocketAddress.of(socket))) {
      ch.write(ByteBuffer.wrap(h.toString().getBytes(StandardCharsets.ISO_8859_1)));
      ch.write(ByteBuffer.wrap(b));
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      ByteBuffer buf = ByteBuffer.allocate(8192);
      while (ch.read(buf) >= 0) {
        out.write(buf.array(), 0, buf.position());
        buf.clear();
      }
      String all = out.toString(StandardCharsets.UTF_8);
      return new String[] {all.substring(9, 12), all.substring(all.indexOf("\r\n\r\n") + 4)};
    }
  }

  static HttpResponse<String> admin(String path) throws Exception {
    return ServerFixture.send(ServerFixture.request(nodePort, path).header("Authorization", "Bearer " + ADMIN)
        .GET().build());
  }

  @Test
  void eachTenantsProxyServesItsOwnFunctionAndNobodyReachesAnothers() throws Exception {
    Child a = proxy("mlp", mlpRef, KEY_A, "--keep-alive", "60s");
    Child b = proxy("gate", gateRef, KEY_B);
    try {
      awaitReady(a);
      awaitReady(b);
      HttpResponse<String> mlp = postJson(a.port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
      assertEquals(200, mlp.statusCode(), mlp.body());
      assertTrue(json(mlp).has("argmax"), mlp.body());
      HttpResponse<String> gate = postJson(b.port, "/v1/functions/gate/invoke", "{}");
      assertEquals(200, gate.statusCode(), gate.body());
      HttpResponse<String> infer = postJson(a.port, "/v2/models/mlp/infer", "{\"inputs\": [{\"name\": \"inputs\", "
          + "\"datatype\": \"FP32\", \"shape\": [1, 8], \"data\": [1, 2, 3, 4, 5, 6, 7, 8]}]}");
      assertEquals(200, infer.statusCode(), infer.body());

      // B's pod asks its proxy for A's function: not there. B asks the socket itself: without A's token, nothing
      // named mlp exists; B cannot take the name, nor delete it; B sees no list and no metrics.
      assertEquals(404, postJson(b.port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
      String[] direct = unix("POST", "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
      assertEquals("404", direct[0], direct[1]);
      assertTrue(direct[1].contains("function_not_found"), direct[1]);
      assertEquals("404", unix("GET", "/v1/functions/mlp", null)[0]);
      String[] take = unix("PUT", "/v1/functions/mlp", "{\"image\": \"" + gateRef + "\"}", "Thaw-Function-Key",
          KEY_B);
      assertEquals("409", take[0], take[1]);
      assertEquals("404", unix("DELETE", "/v1/functions/mlp", null, "Thaw-Function-Key", KEY_B)[0]);
      assertEquals("404", unix("GET", "/v1/functions", null)[0]);
      assertEquals("404", unix("GET", "/metrics", null)[0]);
      // A is still served.
      assertEquals(200, postJson(a.port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
      // The operator sees both, on the node server's own port.
      JsonNode all = json(admin("/v1/functions"));
      assertTrue(all.toString().contains("\"mlp\"") && all.toString().contains("\"gate\""), all.toString());
    } finally {
      a.stop();
      b.stop();
    }
  }

  @Test
  void eachLayerScalesToZeroAndBack() throws Exception {
    String name = "mlp0";
    Child first = proxy(name, mlpRef, KEY_A, "--keep-alive", "1s");
    Child second = null;
    try {
      awaitReady(first);
      HttpResponse<String> cold = postJson(first.port, "/v1/functions/" + name + "/invoke", ServerFixture.MLP_REQUEST);
      assertEquals(200, cold.statusCode(), cold.body());
      assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());

      // Layer 1: the node server scales the GPU instance to zero after its keep-alive; the pod stays up and ready.
      JsonNode zero = awaitAdmin(name, s -> s.get("instances").isEmpty());
      assertEquals("cold", zero.get("state").asText(), zero.toString());
      assertEquals(200, get(first.port, "/v2/health/ready").statusCode(), "a pod without an instance is ready");
      HttpResponse<String> again = postJson(first.port, "/v1/functions/" + name + "/invoke", ServerFixture.MLP_REQUEST);
      assertEquals(200, again.statusCode(), again.body());
      assertEquals("cold", again.headers().firstValue("Thaw-Start").orElseThrow());
      String tier = again.headers().firstValue("Server-Timing").orElseThrow();
      assertTrue(tier.contains("tier;desc=\"hbm\"") || tier.contains("tier;desc=\"host-cache\""),
          "from the node's tiers, not the store: " + tier);

      // Layer 2: Knative scales the pod to zero (SIGTERM); the next pod registers again and serves at once, and the
      // image is not pulled again.
      assertEquals(0, first.stop(), first.log());
      assertTrue(first.log().contains("drained; bye"), first.log());
      assertEquals(200, admin("/v1/functions/" + name).statusCode(), "the node server keeps the function");
      second = proxy(name, mlpRef, KEY_A, "--keep-alive", "1s");
      awaitReady(second);
      assertTrue(second.log().contains(name + " registered with the node server (200)"), second.log());
      HttpResponse<String> back = postJson(second.port, "/v1/functions/" + name + "/invoke", ServerFixture.MLP_REQUEST);
      assertEquals(200, back.statusCode(), back.body());
      long pulls = node.log().lines().filter(l -> l.contains(mlpRef + ": pulled as")).count();
      assertTrue(pulls <= 1, "the image was pulled once at most (another test may have pulled it): " + pulls);
    } finally {
      first.stop();
      if (second != null) {
        second.stop();
      }
    }
  }

  static JsonNode awaitAdmin(String name, Predicate<JsonNode> done) throws Exception {
    JsonNode s = null;
    for (int i = 0; i < 600; i++) {
      s = json(admin("/v1/functions/" + name));
      if (done.test(s)) {
        return s;
      }
      Thread.sleep(50);
    }
    throw new AssertionError(name + " never reached the expected state: " + s);
  }

  @Test
  void sigtermLetsARequestInFlightFinishThenTheProxyExitsZero() throws Exception {
    Child p = proxy("gate1", gateRef, KEY_B);
    try {
      awaitReady(p);
      CompletableFuture<HttpResponse<String>> inFlight = ServerFixture.background(
          () -> postJson(p.port, "/v1/functions/gate1/invoke", "{\"sleepMillis\": 1500}"));
      awaitAdmin("gate1", s -> s.toString().contains("\"state\":\"busy\""));
      p.process.destroy();
      HttpResponse<String> held = inFlight.get(30, TimeUnit.SECONDS);
      assertEquals(200, held.statusCode(), held.body());
      assertTrue(p.process.waitFor(30, TimeUnit.SECONDS));
      assertEquals(0, p.process.exitValue(), p.log());
    } finally {
      p.stop();
    }
  }

  @Test
  void aPullThatFailsIsAClearErrorAndNeverAHang() throws Exception {
    String missing = registry.address() + "/thaw/missing:1";
    Child p = proxy("lost", missing, KEY_A);
    try {
      HttpResponse<String> ready = null;
      for (int i = 0; i < 600; i++) {
        try {
          ready = get(p.port, "/v2/health/ready");
          if (ready.body().contains("image_pull_failed")) {
            break;
          }
        } catch (ConnectException notYet) {
          // Not listening yet.
        }
        Thread.sleep(50);
      }
      assertEquals(503, ready.statusCode(), ready.body());
      assertTrue(ready.body().contains("no manifest"), ready.body());
      long t = System.nanoTime();
      HttpResponse<String> r = postJson(p.port, "/v1/functions/lost/invoke", "{}");
      assertEquals(502, r.statusCode(), r.body());
      assertTrue(r.body().contains("image_pull_failed") && r.body().contains(missing), r.body());
      assertTrue(System.nanoTime() - t < TimeUnit.SECONDS.toNanos(10), "answered, not held");
    } finally {
      p.stop();
    }
  }

  @Test
  void aRegistrationTheNodeRefusesEndsTheProxyWithExitOneAndTheReason() throws Exception {
    Child p = proxy("big", mlpRef, KEY_A, "--max-instances", "9");
    try {
      assertTrue(p.process.waitFor(60, TimeUnit.SECONDS), p.log());
      assertEquals(ThawCli.EXIT_FAILED, p.process.exitValue(), p.log());
      assertTrue(p.log().contains("over_limit") && p.log().contains("maxInstances"), p.log());
    } finally {
      p.stop();
    }
  }

  /** A child JVM running the CLI from the test's class path, its output in a file. */
  static final class Child {
    final Process process;
    final Path log;
    int port;

    private Child(Process process, Path log) {
      this.process = process;
      this.log = log;
    }

    static Child start(Path log, Map<String, String> env, String... args) throws IOException {
      List<String> command = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElse("java"),
          "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
          ThawCli.class.getName()));
      command.addAll(List.of(args));
      ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
      pb.environment().remove("THAW_STORE");
      pb.environment().putAll(env);
      return new Child(pb.start(), log);
    }

    String log() {
      try {
        return Files.readString(log);
      } catch (IOException e) {
        return e.toString();
      }
    }

    void awaitLine(String text, int seconds) throws Exception {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
      while (System.nanoTime() < deadline) {
        if (log().contains(text)) {
          return;
        }
        assertTrue(process.isAlive(), () -> "exited: " + log());
        Thread.sleep(50);
      }
      throw new AssertionError("no '" + text + "' in " + log());
    }

    /** SIGTERM, then its exit status (killed after 30 s). */
    int stop() throws Exception {
      if (process.isAlive()) {
        process.destroy();
        if (!process.waitFor(30, TimeUnit.SECONDS)) {
          process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
      }
      return process.exitValue();
    }
  }
}
