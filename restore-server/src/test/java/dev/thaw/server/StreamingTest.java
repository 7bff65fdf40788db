package dev.thaw.server;

import static dev.thaw.server.ServerFixture.JSON;
import static dev.thaw.server.ServerFixture.awaitState;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.IntSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Streamed completions end to end on a model whose pace the test holds ({@link EchoModel}: it generates its prompt's
 * tokens and waits at a gate): each token leaves the server as its event while the function still runs; a client that
 * leaves mid-stream cancels its generation while the request beside it on the same instance finishes whole; a stop
 * string ends the choice and the generation; the scheduler sends an instance as many requests as it serves at once,
 * queues one more and refuses the next with 429. In process on the sim device, from the real store, over a plain socket.
 * Nothing waits on a timing: the function holds until the test releases it or the request is cancelled.
 */
class StreamingTest {

  static final String PROMPT = " one two three four five";

  @TempDir
  static Path dir;

  static RocksChunkStore store;
  static SimDriver driver;
  static ThawServer server;
  static int port;

  @BeforeAll
  static void start() throws Exception {
    store = ServerFixture.openStore(dir.resolve("store"));
    ServerFixture.build(store, "echo:1", EchoModel.class.getName(), "{}", null, 0);
    driver = SimDriver.open(new SimOptions());
    server = ThawServer.start(new ServerOptions().setPort(0).setStorePath(dir.resolve("store"))
        .addFunction("echo", new FunctionOptions().setImage("echo:1").setMaxInstances(1).setQueueCapacity(1)),
        store, new InProcessInstances(driver, store));
    port = server.port();
  }

  @AfterAll
  static void stop() {
    if (server != null) {
      server.close();
    }
    driver.close();
    store.close();
  }

  @BeforeEach
  void closeTheGate() {
    EchoModel.GATE.drainPermits();
  }

  @AfterEach
  void openTheGate() {
    EchoModel.holdAfter = Integer.MAX_VALUE;
    EchoModel.GATE.release(100);
  }

  static String request(int maxTokens, String extra) {
    return "{\"model\": \"echo\", \"prompt\": \"" + PROMPT + "\", \"max_tokens\": " + maxTokens
        + ", \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}" + extra + "}";
  }

  /** The text of a completion chunk's one choice, or null for a chunk without choices. */
  static String text(String event) throws Exception {
    JsonNode c = JSON.readTree(event).path("choices").path(0);
    return c.isMissingNode() ? null : c.path("text").asText();
  }

  /** Reads events to the end: their texts joined, the finish reasons seen, the usage, and whether [DONE] came last. */
  record Rest(String text, List<String> finishes, JsonNode usage, boolean done) {}

  static Rest rest(SseClient c) throws Exception {
    StringBuilder text = new StringBuilder();
    List<String> finishes = new ArrayList<>();
    JsonNode usage = null;
    String last = null;
    for (String e = c.next(); e != null; e = c.next()) {
      last = e;
      if (e.equals("[DONE]")) {
        continue;
      }
      JsonNode chunk = JSON.readTree(e);
      if (chunk.hasNonNull("usage")) {
        usage = chunk.get("usage");
      }
      for (JsonNode choice : chunk.path("choices")) {
        text.append(choice.path("text").asText());
        if (choice.hasNonNull("finish_reason")) {
          finishes.add(choice.get("finish_reason").asText());
        }
      }
    }
    return new Rest(text.toString(), finishes, usage, "[DONE]".equals(last));
  }

  static void await(IntSupplier value, int expected, String what) throws Exception {
    for (int i = 0; i < 30_000 && value.getAsInt() != expected; i++) {
      Thread.sleep(1);
    }
    assertEquals(expected, value.getAsInt(), what);
  }

  @Test
  void eachTokenLeavesAsItsEventWhileTheFunctionStillRuns() throws Exception {
    EchoModel.holdAfter = 2;
    try (SseClient c = SseClient.post(port, "/v1/completions", request(5, ""))) {
      assertEquals(200, c.status);
      assertEquals("text/event-stream", c.headers.get("content-type"));
      // Two tokens' events arrive while the function waits at the gate: they left before the request ended.
      assertEquals(" one", text(c.next()));
      assertEquals(" two", text(c.next()));
      await(EchoModel.HELD::get, 1, "the function holds after two tokens");
      EchoModel.GATE.release();
      Rest r = rest(c);
      assertEquals(" three four five", r.text());
      assertEquals(List.of("length"), r.finishes());
      assertEquals(5, r.usage().get("completion_tokens").asInt());
      assertEquals(5, r.usage().get("prompt_tokens").asInt());
      assertTrue(r.done(), "[DONE] last");
    }
  }

  @Test
  void aClientThatLeavesCancelsItsGenerationAndTheRequestBesideItFinishesWhole() throws Exception {
    EchoModel.holdAfter = 1;
    int cancelledBefore = EchoModel.CANCELLED.get();
    try (SseClient a = SseClient.post(port, "/v1/completions", request(4, ""));
        SseClient b = SseClient.post(port, "/v1/completions", request(4, ""))) {
      assertEquals(" one", text(a.next()));
      assertEquals(" one", text(b.next()));
      await(EchoModel.HELD::get, 2, "both wait at the gate");
      JsonNode state = json(ServerFixture.get(port, "/v1/functions/echo"));
      assertEquals(1, state.get("instances").size(), state.toString());
      assertEquals(2, state.get("instances").get(0).get("running").asInt(), "one instance serves both at once");

      a.close();
      await(EchoModel.CANCELLED::get, cancelledBefore + 1, "the leaver's generation is cancelled");
      await(EchoModel.HELD::get, 1, "the other still waits");
      EchoModel.GATE.release();
      Rest r = rest(b);
      assertEquals(" two three four", r.text());
      assertEquals(List.of("length"), r.finishes());
      assertTrue(r.done());
    }
    awaitState(port, "echo", s -> s.get("instances").get(0).get("running").asInt() == 0);
    EchoModel.holdAfter = Integer.MAX_VALUE;
    assertEquals(200, postJson(port, "/v1/completions", "{\"model\": \"echo\", \"prompt\": \"" + PROMPT
        + "\", \"max_tokens\": 2}").statusCode(), "the instance serves on");
  }

  @Test
  void aStopStringEndsTheChoiceAndItsGeneration() throws Exception {
    EchoModel.holdAfter = 3;
    int cancelledBefore = EchoModel.CANCELLED.get();
    try (SseClient c = SseClient.post(port, "/v1/completions", request(5, ", \"stop\": \" three\""))) {
      // " three" completes the stop string: the choice ends, and the function, holding after it, is cancelled.
      Rest r = rest(c);
      assertEquals(" one two", r.text());
      assertEquals(List.of("stop"), r.finishes());
      assertEquals(3, r.usage().get("completion_tokens").asInt(), "the tokens up to the stop string's");
      assertTrue(r.done());
    }
    await(EchoModel.CANCELLED::get, cancelledBefore + 1, "the generation stopped at the stop string");
  }

  @Test
  void anInstanceTakesAsManyRequestsAsItServesAtOnceAndTheQueueTheRest() throws Exception {
    EchoModel.holdAfter = 0;
    String ask = "{\"model\": \"echo\", \"prompt\": \"" + PROMPT + "\", \"max_tokens\": 2}";
    List<CompletableFuture<HttpResponse<String>>> running = new ArrayList<>();
    for (int i = 0; i < 2; i++) {
      running.add(ServerFixture.background(() -> postJson(port, "/v1/completions", ask)));
    }
    await(EchoModel.HELD::get, 2, "its one instance serves two at once (maxInstances 1)");
    running.add(ServerFixture.background(() -> postJson(port, "/v1/completions", ask)));
    awaitState(port, "echo", s -> s.get("queued").asInt() == 1);
    HttpResponse<String> refused = postJson(port, "/v1/completions", ask);
    assertEquals(429, refused.statusCode(), refused.body());
    assertTrue(refused.headers().firstValue("Retry-After").isPresent());
    assertEquals("rate_limit_error", json(refused).get("error").get("type").asText());
    EchoModel.holdAfter = Integer.MAX_VALUE;
    EchoModel.GATE.release(2);
    for (CompletableFuture<HttpResponse<String>> r : running) {
      HttpResponse<String> got = r.get(60, TimeUnit.SECONDS);
      assertEquals(200, got.statusCode(), got.body());
      assertEquals(" one two", json(got).get("choices").get(0).get("text").asText());
    }
  }

  @Test
  void aRefusedStreamIsAnErrorWithItsStatusNotAStream() throws Exception {
    try (SseClient c = SseClient.post(port, "/v1/completions", request(5000, ""))) {
      assertEquals(400, c.status);
      assertEquals("context_length_exceeded", JSON.readTree(c.body()).get("error").get("code").asText());
    }
  }
}
