package dev.thaw.server.proxy;

import static dev.thaw.server.ServerFixture.json;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.Images;
import dev.thaw.image.registry.ImagePusher;
import dev.thaw.image.registry.RegistryOptions;
import dev.thaw.image.registry.TestRegistry;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.GateFunction;
import dev.thaw.server.ServerFixture;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.TenantLimits;
import dev.thaw.server.ThawServer;
import dev.thaw.server.impl.InProcessInstances;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link FunctionProxy} in front of a node server (in this process, the sim device, in-process instances) that pulls
 * its functions from a real registry on loopback (Debian's docker-registry; skipped, saying why, where it cannot
 * run): the proxy registers by reference and forwards its own function's routes and nothing else, passes readiness
 * through, survives a node server's restart by registering again, streams bodies both ways (server-sent events
 * included), drains, and ends when the server refuses its registration for good.
 */
class FunctionProxyTest {

  static final String KEY_A = "tenant-a-key-0123456789";
  static final String KEY_B = "tenant-b-key-0123456789";

  @TempDir
  static Path dir;

  static TestRegistry registry;
  static RocksChunkStore built;
  static String mlpRef;
  static String gateRef;
  static String gptRef;

  RocksChunkStore store;
  SimDriver driver;
  ThawServer server;
  FunctionProxy proxy;
  FunctionProxy other;

  @BeforeAll
  static void images() throws Exception {
    registry = TestRegistry.start(dir.resolve("registry"), null);
    built = ServerFixture.openStore(dir.resolve("built"));
    ServerFixture.buildMlp(built, "mlp:1");
    ServerFixture.build(built, "gate:1", GateFunction.class.getName(), "{}", null, 64L << 20);
    ServerFixture.build(built, "gpt2:tiny", ServerFixture.GPT2, "{\"model\": \"tiny\", \"seed\": 5, \"maxBatch\": 2}",
        null, 128L << 20);
    ImagePusher pusher = new ImagePusher(new RegistryOptions());
    mlpRef = pusher.push(built, "mlp:1", registry.reference("thaw/mlp:1")).reference();
    gateRef = pusher.push(built, "gate:1", registry.reference("thaw/gate:1")).reference();
    gptRef = pusher.push(built, "gpt2:tiny", registry.reference("thaw/gpt2:tiny")).reference();
  }

  @AfterAll
  static void stopRegistry() throws Exception {
    if (built != null) {
      built.close();
    }
    if (registry != null) {
      registry.close();
    }
  }

  @AfterEach
  void stop() {
    for (FunctionProxy p : new FunctionProxy[] {proxy, other}) {
      if (p != null) {
        p.close();
      }
    }
    if (server != null) {
      server.close();
    }
    if (driver != null) {
      driver.close();
    }
    if (store != null) {
      store.close();
    }
  }

  Path socket() {
    return dir.resolve("run/thaw.sock");
  }

  /** A node server that runs the test's gate function for tenants too. */
  void startServer(String storeName) {
    Set<String> functions = new HashSet<>(TenantLimits.DEFAULT_FUNCTIONS);
    functions.add(GateFunction.class.getName());
    startServer(storeName, new TenantLimits().setFunctions(functions));
  }

  void startServer(String storeName, TenantLimits limits) {
    if (store == null) {
      store = ServerFixture.openStore(dir.resolve(storeName));
      driver = SimDriver.open(new SimOptions());
    }
    server = ThawServer.start(new ServerOptions().setPort(0).setSocketPath(socket())
        .setAdminToken(NodeServerTest.ADMIN).setTenants(limits), store, new InProcessInstances(driver, store));
  }

  FunctionProxy startProxy(String name, String reference, String key) {
    return FunctionProxy.start(new ProxyOptions().setPort(0).setSocket(socket()).setFunction(name, reference)
        .setTenantKey(key).putFunctionOption("keepAlive", "60s").setDrainTimeout(Duration.ofSeconds(20)));
  }

  static HttpResponse<String> get(FunctionProxy p, String path) throws Exception {
    return ServerFixture.get(p.port(), path);
  }

  static HttpResponse<String> post(FunctionProxy p, String path, String body) throws Exception {
    return ServerFixture.postJson(p.port(), path, body);
  }

  static void awaitReady(FunctionProxy p) throws Exception {
    HttpResponse<String> r = null;
    for (int i = 0; i < 3000; i++) {
      r = get(p, "/v2/health/ready");
      if (r.statusCode() == 200) {
        return;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("the proxy never became ready: " + r.body());
  }

  @Test
  void aProxyRegistersByReferenceAndForwardsItsOwnFunctionsRoutesAndNothingElse() throws Exception {
    startServer("node-a");
    proxy = startProxy("mlp", mlpRef, KEY_A);
    assertEquals(200, get(proxy, "/v2/health/live").statusCode(), "live at once, the server's answer aside");
    awaitReady(proxy);
    assertEquals("{\"ready\": true}", get(proxy, "/v2/health/ready").body());

    HttpResponse<String> cold = post(proxy, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(200, cold.statusCode(), cold.body());
    assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());
    assertTrue(cold.headers().firstValue("Server-Timing").orElseThrow().contains("restore-wait;dur="));
    JsonNode builds = Images.manifest(built, "mlp:1").samples().get(0).response();
    assertEquals(builds.get("argmax"), json(cold).get("argmax"), "the image pulled answers as the build did");
    assertEquals("warm", post(proxy, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).headers()
        .firstValue("Thaw-Start").orElseThrow());

    JsonNode meta = json(get(proxy, "/v2/models/mlp"));
    assertEquals("mlp", meta.get("name").asText());
    assertTrue(meta.get("versions").get(0).asText().startsWith("sha256-"), "the local tag names the digest: " + meta);
    HttpResponse<String> infer = post(proxy, "/v2/models/mlp/infer", "{\"inputs\": [{\"name\": \"inputs\", "
        + "\"datatype\": \"FP32\", \"shape\": [1, 8], \"data\": [1, 2, 3, 4, 5, 6, 7, 8]}]}");
    assertEquals(200, infer.statusCode(), infer.body());
    JsonNode state = json(get(proxy, "/v1/functions/mlp"));
    assertEquals(mlpRef, state.get("options").get("image").asText());
    assertEquals("60s", state.get("options").get("keepAlive").asText());

    // Nothing but its own function's routes, whatever the server would answer.
    for (String path : new String[] {"/v1/functions/gate/invoke", "/v1/functions", "/metrics", "/v2/models/gate"}) {
      HttpResponse<String> r = path.endsWith("invoke") ? post(proxy, path, "{}") : get(proxy, path);
      assertEquals(404, r.statusCode(), path);
      assertTrue(r.body().contains("on the proxy of function 'mlp'"), r.body());
    }
  }

  @Test
  void aNodeServerThatRestartedGetsTheFunctionRegisteredAgainByTheNextRequest() throws Exception {
    startServer("node-b");
    proxy = startProxy("mlp", mlpRef, KEY_A);
    awaitReady(proxy);
    assertEquals(200, post(proxy, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());

    server.close();
    HttpResponse<String> down = post(proxy, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(502, down.statusCode(), down.body());
    assertTrue(down.body().contains("node_unreachable"), down.body());
    assertEquals(503, get(proxy, "/v2/health/ready").statusCode());
    assertEquals(200, get(proxy, "/v2/health/live").statusCode(), "the proxy itself lives on");

    startServer("node-b");
    // The new server knows nothing: the request is registered again and sent again, and the image is in the store.
    HttpResponse<String> again = post(proxy, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(200, again.statusCode(), again.body());
    JsonNode state = json(get(proxy, "/v1/functions/mlp"));
    assertEquals("warm", state.get("state").asText(), state.toString());
  }

  @Test
  void bodiesStreamBothWaysAndServerSentEventsArriveAsSent() throws Exception {
    startServer("node-c");
    proxy = startProxy("gpt2", gptRef, KEY_A);
    other = startProxy("mlp", mlpRef, KEY_B);
    awaitReady(proxy);
    awaitReady(other);

    // Greedy (temperature 0), so that the streamed completion is the plain one's: OpenAI's default samples.
    String request = "{\"model\": \"gpt2\", \"prompt\": [1, 2], \"max_tokens\": 3, \"temperature\": 0";
    HttpResponse<String> plain = post(proxy, "/v1/completions", request + "}");
    assertEquals(200, plain.statusCode(), plain.body());
    HttpResponse<InputStream> sse = ServerFixture.CLIENT.send(ServerFixture.request(proxy.port(), "/v1/completions")
        .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(request
            + ", \"stream\": true}")).build(),
        HttpResponse.BodyHandlers.ofInputStream());
    assertEquals(200, sse.statusCode());
    assertTrue(sse.headers().firstValue("Content-Type").orElseThrow().startsWith("text/event-stream"));
    String events = new String(sse.body().readAllBytes(), StandardCharsets.UTF_8);
    // A chunk per token (one that ends inside a UTF-8 character waits for the next token's bytes), the chunk that
    // gives the finish reason, then [DONE]; the chunks' text is the plain completion's.
    String[] chunks = events.split("\n\n");
    assertTrue(chunks.length >= 3 && chunks.length <= 5, events);
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < chunks.length - 1; i++) {
      assertTrue(chunks[i].startsWith("data: "), events);
      text.append(ServerFixture.JSON.readTree(chunks[i].substring("data: ".length())).at("/choices/0/text").asText());
    }
    assertEquals(json(plain).at("/choices/0/text").asText(), text.toString(), events);
    assertTrue(events.contains("\"finish_reason\":\"length\""), events);
    assertTrue(events.endsWith("data: [DONE]\n\n"), events);
    // The other tenant's proxy reaches only its own function.
    HttpResponse<String> cross = post(other, "/v1/completions", "{\"model\": \"gpt2\", \"prompt\": [1, 2]}");
    assertEquals(404, cross.statusCode(), cross.body());
    assertTrue(cross.body().contains("model_not_found"), cross.body());

    // A body sent chunked, and one larger than the proxy keeps, reach the server whole (here: a request the MLP
    // refuses for its batch size, answered by the function itself).
    StringBuilder rows = new StringBuilder("{\"inputs\": [");
    for (int i = 0; i < 4000; i++) {
      rows.append(i == 0 ? "" : ",").append("[1, 2, 3, 4, 5, 6, 7, 8]");
    }
    String large = rows.append("]}").toString();
    assertTrue(large.length() > FunctionProxy.REPLAYABLE_BYTES);
    for (HttpRequest.BodyPublisher body : new HttpRequest.BodyPublisher[] {
        HttpRequest.BodyPublishers.ofString(large),
        HttpRequest.BodyPublishers.ofInputStream(() -> new ByteArrayInputStream(
            ServerFixture.MLP_REQUEST.getBytes(StandardCharsets.UTF_8)))}) {
      HttpResponse<String> r = ServerFixture.send(ServerFixture.request(other.port(), "/v1/functions/mlp/invoke")
          .header("Content-Type", "application/json").POST(body).build());
      String direct = ServerFixture.send(ServerFixture.request(server.port(), "/v1/functions/mlp/invoke")
          .header("Content-Type", "application/json").header("Authorization", "Bearer " + NodeServerTest.ADMIN)
          .POST(body).build()).body();
      // Each request has its own id; everything else is the same.
      assertEquals(ServerFixture.withoutRequestId(direct), ServerFixture.withoutRequestId(r.body()),
          "the same answer through the proxy as straight from the server");
    }
  }

  @Test
  void drainingFinishesRequestsInFlightAndRefusesNewOnes() throws Exception {
    startServer("node-d");
    proxy = startProxy("gate", gateRef, KEY_A);
    awaitReady(proxy);
    CompletableFuture<HttpResponse<String>> held = ServerFixture.background(
        () -> post(proxy, "/v1/functions/gate/invoke", "{\"hold\": true}"));
    for (int i = 0; i < 2000 && GateFunction.WAITING.get() == 0; i++) {
      Thread.sleep(10);
    }
    assertEquals(1, GateFunction.WAITING.get(), "the request waits at the gate, in the server");
    CompletableFuture<Boolean> drained = CompletableFuture.supplyAsync(() -> proxy.drain(Duration.ofSeconds(20)));
    for (int i = 0; i < 500 && get(proxy, "/v2/health/ready").statusCode() == 200; i++) {
      Thread.sleep(10);
    }
    assertEquals(503, get(proxy, "/v2/health/ready").statusCode(), "not ready once draining");
    HttpResponse<String> refused = post(proxy, "/v1/functions/gate/invoke", "{}");
    assertEquals(503, refused.statusCode());
    assertTrue(refused.body().contains("draining"), refused.body());
    assertFalse(drained.isDone(), "a request is in flight");
    GateFunction.GATE.release();
    assertEquals(200, held.get(30, TimeUnit.SECONDS).statusCode());
    assertTrue(drained.get(30, TimeUnit.SECONDS), "drained in time");
  }

  @Test
  void aRegistrationTheServerRefusesForGoodEndsTheProxyWithTheServersReason() throws Exception {
    startServer("node-e");
    proxy = startProxy("mlp", mlpRef, KEY_A);
    awaitReady(proxy);
    other = startProxy("mlp", mlpRef, KEY_B);
    String why = other.refused().get(30, TimeUnit.SECONDS);
    assertTrue(why.contains("409") && why.contains("another tenant"), why);
    HttpResponse<String> ready = get(other, "/v2/health/ready");
    assertEquals(503, ready.statusCode());
    assertTrue(ready.body().contains("another tenant"), ready.body());
  }

  @Test
  void anImageWhoseFunctionTheNodeDoesNotRunForTenantsIsRefused() throws Exception {
    startServer("node-f", new TenantLimits());
    proxy = startProxy("gate", gateRef, KEY_A);
    String why = proxy.refused().get(30, TimeUnit.SECONDS);
    assertTrue(why.contains("403") && why.contains(GateFunction.class.getName())
        && why.contains("not one this node runs for tenants"), why);
  }
}
