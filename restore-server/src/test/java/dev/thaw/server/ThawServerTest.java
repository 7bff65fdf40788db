package dev.thaw.server;

import static dev.thaw.server.ServerFixture.JSON;
import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static dev.thaw.server.ServerFixture.request;
import static dev.thaw.server.ServerFixture.send;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.knuddels.jtokkit.Encodings;
import com.knuddels.jtokkit.api.EncodingType;
import com.knuddels.jtokkit.api.IntArrayList;
import dev.thaw.image.Images;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The server on loopback against the real RocksDB store and the sim device: what each API answers, and how it
 * refuses what it must refuse. One server for the class; functions: {@code mlp}, {@code gate}, {@code gpt2}.
 */
class ThawServerTest {

  @TempDir
  static Path dir;

  static RocksChunkStore store;
  static SimDriver driver;
  static ThawServer server;
  static int port;

  @BeforeAll
  static void start() throws Exception {
    store = ServerFixture.openStore(dir.resolve("store"));
    ServerFixture.buildMlp(store, "mlp:1");
    ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 64L << 20);
    ServerFixture.build(store, "gpt2:tiny", ServerFixture.GPT2, "{\"model\": \"tiny\", \"seed\": 5, \"maxBatch\": 2}",
        null, 128L << 20);
    driver = SimDriver.open(new SimOptions());
    ServerOptions options = new ServerOptions().setPort(0).setStorePath(dir.resolve("store")).setMaxBodyBytes(64 * 1024)
        .setMaxJsonDepth(16)
        .addFunction("mlp", new FunctionOptions().setImage("mlp:1"))
        .addFunction("gate", new FunctionOptions().setImage("gate:1"))
        .addFunction("gpt2", new FunctionOptions().setImage("gpt2:tiny"));
    server = ThawServer.start(options, store, new InProcessInstances(driver, store));
    port = server.port();
  }

  @AfterAll
  static void stop() {
    if (server != null) {
      server.close();
      assertEquals(0, server.instanceCount(), "every instance evicted at close");
      assertEquals(0, driver.memoryInUse(), "every instance's device memory freed");
    }
    driver.close();
    store.close();
  }

  @Test
  void invokeIsColdOnceThenWarmWithServerTimingPhasesAndTheBuildsResponse() throws Exception {
    HttpResponse<String> cold = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    HttpResponse<String> warm = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(200, cold.statusCode(), cold.body());
    assertEquals(200, warm.statusCode(), warm.body());
    JsonNode built = Images.manifest(store, "mlp:1").samples().get(0).response();
    assertEquals(built.get("argmax"), json(cold).get("argmax"));
    assertEquals(json(cold), json(warm));
    // Other tests may have warmed it first; what must hold is that a warm one follows.
    assertEquals("warm", warm.headers().firstValue("Thaw-Start").orElseThrow());
    String timing = cold.headers().firstValue("Server-Timing").orElseThrow();
    if (cold.headers().firstValue("Thaw-Start").orElseThrow().equals("cold")) {
      for (String phase : List.of("queue", "acquire", "map", "restore-wait", "invoke")) {
        assertTrue(Pattern.compile("(^|, )" + phase + ";dur=[0-9.]+").matcher(timing).find(), phase + " in " + timing);
      }
    }
    String warmTiming = warm.headers().firstValue("Server-Timing").orElseThrow();
    Matcher m = Pattern.compile("queue;dur=([0-9.]+), invoke;dur=([0-9.]+), function;dur=([0-9.]+), "
        + "server;dur=([0-9.]+)").matcher(warmTiming);
    assertTrue(m.matches(), warmTiming);
    // The function's own time is a part of the invoke phase, which is a part of the request inside the server.
    double invoke = Double.parseDouble(m.group(2));
    assertTrue(Double.parseDouble(m.group(3)) <= invoke + 0.002, warmTiming);
    assertTrue(Double.parseDouble(m.group(1)) + invoke <= Double.parseDouble(m.group(4)) + 0.002, warmTiming);
  }

  @Test
  void rawBytesInvokeTheSameFunctionAsJson() throws Exception {
    ByteBuffer floats = ByteBuffer.allocate(32).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 1; i <= 8; i++) {
      floats.putFloat(i);
    }
    HttpResponse<String> r = send(request(port, "/v1/functions/mlp/invoke?rows=1")
        .header("Content-Type", "application/octet-stream")
        .POST(HttpRequest.BodyPublishers.ofByteArray(floats.array())).build());
    assertEquals(200, r.statusCode(), r.body());
    assertEquals(json(postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST)).get("outputs"),
        json(r).get("outputs"));
  }

  @Test
  void unknownFunctionsAndBadNamesAreRefused() throws Exception {
    HttpResponse<String> missing = postJson(port, "/v1/functions/nope/invoke", "{}");
    assertEquals(404, missing.statusCode());
    assertEquals("function_not_found", json(missing).get("code").asText());
    assertEquals(400, postJson(port, "/v1/functions/Bad_Name/invoke", "{}").statusCode());
    assertEquals(404, get(port, "/v1/nothing/here").statusCode());
  }

  @Test
  void badBodiesAreRefusedWithTheRightStatusAndTheServerServesOn() throws Exception {
    HttpResponse<String> bad = postJson(port, "/v1/functions/mlp/invoke", "{\"inputs\": [[1, 2,");
    assertEquals(400, bad.statusCode());
    assertTrue(json(bad).get("error").asText().contains("not valid JSON"), bad.body());
    assertEquals(400, postJson(port, "/v1/functions/mlp/invoke", "[1, 2]").statusCode());
    assertEquals(400, postJson(port, "/v1/functions/mlp/invoke", "").statusCode());

    HttpResponse<String> text = send(request(port, "/v1/functions/mlp/invoke").header("Content-Type", "text/plain")
        .POST(HttpRequest.BodyPublishers.ofString(ServerFixture.MLP_REQUEST)).build());
    assertEquals(415, text.statusCode(), text.body());

    HttpResponse<String> big = postJson(port, "/v1/functions/mlp/invoke", "{\"x\": \"" + "a".repeat(70_000) + "\"}");
    assertEquals(413, big.statusCode(), big.body());

    String deep = "{\"a\": " + "[".repeat(40) + "]".repeat(40) + "}";
    HttpResponse<String> tooDeep = postJson(port, "/v1/functions/mlp/invoke", deep);
    assertEquals(400, tooDeep.statusCode());
    assertTrue(json(tooDeep).get("error").asText().toLowerCase().contains("depth"), tooDeep.body());

    HttpResponse<String> refused = postJson(port, "/v1/functions/mlp/invoke", "{\"inputs\": [[1, 2]]}");
    assertEquals(400, refused.statusCode());
    assertEquals("invalid_request", json(refused).get("code").asText());
    assertTrue(json(refused).get("error").asText().contains("the model takes 8"), refused.body());

    assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
  }

  @Test
  void malformedHttpIsAnsweredWith400AndTheServerServesOn() throws Exception {
    try (Socket s = new Socket("127.0.0.1", port)) {
      s.getOutputStream().write("NOT HTTP AT ALL\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
      String reply = new String(s.getInputStream().readNBytes(12), StandardCharsets.US_ASCII);
      assertTrue(reply.matches("HTTP/1\\.[01] 400"), reply);
    }
    try (Socket s = new Socket("127.0.0.1", port)) {
      s.getOutputStream().write(("GET /" + "a".repeat(20_000) + " HTTP/1.1\r\nHost: x\r\n\r\n")
          .getBytes(StandardCharsets.US_ASCII));
      String reply = new String(s.getInputStream().readNBytes(12), StandardCharsets.US_ASCII);
      assertTrue(reply.matches("HTTP/1\\.[01] 414"), reply);
    }
    assertEquals(200, get(port, "/v2/health/live").statusCode());
  }

  @Test
  void aClientThatDisconnectsMidBodyOrWhileQueuedLeavesNothingBehind() throws Exception {
    try (Socket s = new Socket("127.0.0.1", port)) {
      OutputStream out = s.getOutputStream();
      out.write(("POST /v1/functions/mlp/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          + "Content-Length: 1000\r\n\r\n{\"inputs\": [[1,").getBytes(StandardCharsets.US_ASCII));
      out.flush();
    }
    // Hold the gate's only instance, then queue a request behind it on a raw socket and leave.
    CompletableFuture<HttpResponse<String>> held = ServerFixture.background(
        () -> postJson(port, "/v1/functions/gate/invoke", "{\"hold\": true}"));
    awaitWaiting(1);
    Socket queued = new Socket("127.0.0.1", port);
    String body = "{\"n\": 1}";
    queued.getOutputStream().write(("POST /v1/functions/gate/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: "
        + "application/json\r\nContent-Length: " + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.US_ASCII));
    awaitQueued("gate", 1);
    queued.close();
    awaitQueued("gate", 0);
    GateFunction.GATE.release();
    assertEquals(200, held.get(30, TimeUnit.SECONDS).statusCode());
    HttpResponse<String> after = postJson(port, "/v1/functions/gate/invoke", "{}");
    assertEquals(200, after.statusCode(), after.body());
    assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
  }

  @Test
  void theAdminApiNeedsTheTokenWhichIsKeptInTheStoreWithMode0600() throws Exception {
    Path tokenFile = dir.resolve("store").resolve(ServerOptions.ADMIN_TOKEN_FILE);
    assertEquals(server.adminTokenFile(), tokenFile);
    assertEquals(Set.of(PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE), Files.getPosixFilePermissions(tokenFile));
    assertEquals(server.adminToken(), Files.readString(tokenFile).trim());
    String body = "{\"image\": \"mlp:1\", \"maxInstances\": 1, \"keepAlive\": \"60s\"}";

    HttpResponse<String> none = send(request(port, "/v1/functions/mlp2").header("Content-Type", "application/json")
        .PUT(HttpRequest.BodyPublishers.ofString(body)).build());
    assertEquals(401, none.statusCode());
    assertEquals("Bearer", none.headers().firstValue("WWW-Authenticate").orElseThrow());
    HttpResponse<String> wrong = send(request(port, "/v1/functions/mlp2").header("Content-Type", "application/json")
        .header("Authorization", "Bearer " + "x".repeat(43)).PUT(HttpRequest.BodyPublishers.ofString(body)).build());
    assertEquals(401, wrong.statusCode());
    assertEquals(401, send(request(port, "/v1/functions/mlp").DELETE().build()).statusCode());
    assertEquals(404, postJson(port, "/v1/functions/mlp2/invoke", ServerFixture.MLP_REQUEST).statusCode());

    HttpResponse<String> created = admin(HttpRequest.newBuilder().PUT(HttpRequest.BodyPublishers.ofString(body)),
        "/v1/functions/mlp2");
    assertEquals(201, created.statusCode(), created.body());
    assertEquals("cold", json(created).get("state").asText());
    HttpResponse<String> missingImage = admin(HttpRequest.newBuilder()
        .PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"none:1\"}")), "/v1/functions/x1");
    assertEquals(404, missingImage.statusCode(), missingImage.body());
    HttpResponse<String> badField = admin(HttpRequest.newBuilder()
        .PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"mlp:1\", \"replicas\": 3}")), "/v1/functions/x1");
    assertEquals(400, badField.statusCode(), badField.body());

    JsonNode list = json(get(port, "/v1/functions"));
    assertTrue(list.get("functions").findValuesAsText("name").contains("mlp2"), list.toString());
    assertEquals("mlp:1", json(get(port, "/v1/functions/mlp2")).get("options").get("image").asText());

    HttpResponse<String> deleted = admin(HttpRequest.newBuilder().DELETE(), "/v1/functions/mlp2");
    assertEquals(200, deleted.statusCode(), deleted.body());
    assertEquals(404, get(port, "/v1/functions/mlp2").statusCode());
  }

  private static HttpResponse<String> admin(HttpRequest.Builder b, String path) throws Exception {
    return send(b.uri(URI.create("http://127.0.0.1:" + port + path)).header("Content-Type", "application/json")
        .header("Authorization", "Bearer " + server.adminToken()).build());
  }

  @Test
  void kserveV2DescribesAndInfersTheMlpFromItsDeclaredTensors() throws Exception {
    assertEquals("{\"live\":true}", get(port, "/v2/health/live").body());
    assertEquals(200, get(port, "/v2/health/ready").statusCode());
    JsonNode meta = json(get(port, "/v2/models/mlp"));
    assertEquals("mlp", meta.get("name").asText());
    assertEquals(JSON.readTree("[{\"name\":\"inputs\",\"datatype\":\"FP32\",\"shape\":[-1,8]}]"), meta.get("inputs"));
    assertEquals("argmax", meta.get("outputs").get(1).get("name").asText());
    assertEquals(200, get(port, "/v2/models/mlp/ready").statusCode());
    assertEquals(404, get(port, "/v2/models/nope/ready").statusCode());

    String infer = "{\"id\": \"r1\", \"inputs\": [{\"name\": \"inputs\", \"shape\": [1, 8], \"datatype\": \"FP32\", "
        + "\"data\": [1, 2, 3, 4, 5, 6, 7, 8]}]}";
    HttpResponse<String> r = postJson(port, "/v2/models/mlp/infer", infer);
    assertEquals(200, r.statusCode(), r.body());
    JsonNode out = json(r);
    assertEquals("r1", out.get("id").asText());
    JsonNode direct = json(postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST));
    JsonNode argmax = out.get("outputs").get(1);
    assertEquals("INT64", argmax.get("datatype").asText());
    assertEquals(JSON.readTree("[1]"), argmax.get("shape"));
    assertEquals(direct.get("argmax"), argmax.get("data"));
    assertEquals(JSON.readTree("[1, 4]"), out.get("outputs").get(0).get("shape"));

    assertEquals(400, postJson(port, "/v2/models/mlp/infer", infer.replace("FP32", "INT32")).statusCode());
    assertEquals(400, postJson(port, "/v2/models/mlp/infer", infer.replace("[1, 8]", "[1, 7]")).statusCode());
    assertEquals(400, postJson(port, "/v2/models/mlp/infer", infer.replace("\"inputs\", \"shape\"", "\"x\", \"shape\""))
        .statusCode());
    assertEquals(400, postJson(port, "/v2/models/gate/infer", infer).statusCode(), "gate declares no tensors");
  }

  @Test
  void completionsRunGpt2OnTokenIdsOrTextAndRefuseWhatIsNotSupported() throws Exception {
    HttpResponse<String> ids = postJson(port, "/v1/completions",
        "{\"model\": \"gpt2\", \"prompt\": [5, 17, 33], \"max_tokens\": 4, \"temperature\": 0}");
    assertEquals(200, ids.statusCode(), ids.body());
    JsonNode c = json(ids);
    assertEquals("text_completion", c.get("object").asText());
    assertEquals(3, c.get("usage").get("prompt_tokens").asInt());
    assertEquals(4, c.get("usage").get("completion_tokens").asInt());
    assertEquals("length", c.get("choices").get(0).get("finish_reason").asText());
    JsonNode direct = json(postJson(port, "/v1/functions/gpt2/invoke", "{\"tokens\": [[5, 17, 33]], \"maxNewTokens\": 4}"));
    IntArrayList expected = new IntArrayList();
    direct.get("tokens").get(0).forEach(t -> expected.add(t.asInt()));
    String text = Encodings.newDefaultEncodingRegistry()
        .getEncoding(EncodingType.R50K_BASE).decode(expected);
    assertEquals(text, c.get("choices").get(0).get("text").asText());

    // "A" is r50k_base token 32, inside the tiny model's 97-token vocabulary.
    HttpResponse<String> prompt = postJson(port, "/v1/completions", "{\"model\": \"gpt2\", \"prompt\": \"A\", \"max_tokens\": 2, \"temperature\": 0}");
    assertEquals(200, prompt.statusCode(), prompt.body());
    assertEquals(1, json(prompt).get("usage").get("prompt_tokens").asInt());

    HttpResponse<String> stream = postJson(port, "/v1/completions",
        "{\"model\": \"gpt2\", \"prompt\": [5, 17, 33], \"max_tokens\": 4, \"stream\": true, \"temperature\": 0}");
    assertEquals(200, stream.statusCode());
    assertEquals("text/event-stream", stream.headers().firstValue("Content-Type").orElseThrow());
    List<String> events = stream.body().lines().filter(l -> l.startsWith("data: ")).toList();
    assertEquals("data: [DONE]", events.get(events.size() - 1));
    StringBuilder streamed = new StringBuilder();
    for (String e : events.subList(0, events.size() - 1)) {
      streamed.append(JSON.readTree(e.substring(6)).get("choices").get(0).get("text").asText());
    }
    assertEquals(text, streamed.toString());

    for (String bad : List.of("{\"model\": \"gpt2\", \"prompt\": \"A\", \"temperature\": 2.7}",
        "{\"model\": \"gpt2\", \"prompt\": \"A\", \"top_p\": 0}", "{\"model\": \"gpt2\", \"prompt\": \"A\", \"n\": 3}",
        "{\"model\": \"gpt2\", \"prompt\": \"A\", \"logprobs\": 9}", "{\"model\": \"gpt2\", \"prompt\": \"A\", \"stop\": 1}",
        "{\"model\": \"gpt2\", \"prompt\": [500]}", "{\"model\": \"gpt2\"}")) {
      HttpResponse<String> r = postJson(port, "/v1/completions", bad);
      assertEquals(400, r.statusCode(), bad);
      assertEquals("invalid_request_error", json(r).get("error").get("type").asText(), r.body());
    }
    HttpResponse<String> unknown = postJson(port, "/v1/completions", "{\"model\": \"gpt9\", \"prompt\": \"A\"}");
    assertEquals(404, unknown.statusCode());
    assertEquals("model_not_found", json(unknown).get("error").get("code").asText());
    HttpResponse<String> notLm = postJson(port, "/v1/completions", "{\"model\": \"mlp\", \"prompt\": \"A\"}");
    assertEquals(400, notLm.statusCode());
    assertEquals("model_not_supported", json(notLm).get("error").get("code").asText());
  }

  @Test
  void metricsAndTracesShowColdStartsPhasesQueuesAndMemory() throws Exception {
    postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    HttpResponse<String> m = get(port, "/metrics");
    assertEquals(200, m.statusCode());
    String text = m.body();
    for (String metric : List.of("thaw_invocations_total{", "thaw_phase_seconds_bucket{", "thaw_queue_depth{",
        "thaw_instances{", "thaw_gpu_memory_reserved_bytes{", "thaw_gpu_memory_budget_bytes{", "thaw_restore_bytes_total{")) {
      assertTrue(text.contains(metric), metric + " in /metrics");
    }
    assertTrue(Pattern.compile("thaw_invocations_total\\{[^}]*function=\"mlp\"[^}]*start=\"cold\"[^}]*\\} 1\\.0")
        .matcher(text).find(), "one cold mlp invocation");

    JsonNode trace = json(get(port, "/v1/functions/mlp/trace"));
    List<String> names = trace.get("traceEvents").findValuesAsText("name");
    assertTrue(names.containsAll(List.of("queue", "acquire", "map", "restore-wait", "invoke")), names.toString());
    // The on-demand restore's own timeline joins it once every copy has landed: its copies on the restore stream.
    String restoreRows = "";
    for (int i = 0; i < 1000 && !restoreRows.contains("restore stream"); i++) {
      restoreRows = json(get(port, "/v1/functions/mlp/trace")).get("traceEvents").findValuesAsText("args").toString()
          + get(port, "/v1/functions/mlp/trace").body();
      Thread.sleep(10);
    }
    assertTrue(restoreRows.contains("restore stream: copies"), restoreRows);
    assertTrue(restoreRows.contains("\"name\":\"w0\""), "the copy of allocation w0 on the timeline");
  }

  static void awaitWaiting(int n) throws InterruptedException {
    for (int i = 0; i < 2000 && GateFunction.WAITING.get() != n; i++) {
      Thread.sleep(5);
    }
    assertEquals(n, GateFunction.WAITING.get(), "requests held at the gate");
  }

  static void awaitQueued(String function, int n) throws Exception {
    int queued = -1;
    for (int i = 0; i < 2000; i++) {
      queued = json(get(port, "/v1/functions/" + function)).get("queued").asInt();
      if (queued == n) {
        return;
      }
      Thread.sleep(5);
    }
    assertEquals(n, queued, "requests queued for " + function);
  }
}
