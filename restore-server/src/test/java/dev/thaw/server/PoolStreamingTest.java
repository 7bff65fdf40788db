package dev.thaw.server;

import static dev.thaw.server.ServerFixture.JSON;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A streamed chat completion from a Llama in a worker process: its tokens travel as PART frames of the worker protocol
 * and leave as server-sent events, which add up to the completion the same request gets whole, with its usage. The sim
 * device, the real store, a real pool.
 */
class PoolStreamingTest {

  @TempDir
  Path dir;

  @Test
  void aWorkersTokensReachTheClientAsEventsThatAddUpToTheWholeCompletion() throws Exception {
    Path model = ChatModel.write(dir.resolve("llama"), true);
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.build(store, "chat:1", "dev.thaw.examples.llama.LlamaFunction", "{\"path\": \"" + model
          + "\", \"maxBatch\": 4, \"maxTokens\": 64}", null, 0);
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ContextPool pool = ContextPool.create(new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(1)
          .setMaxWorkers(2).setDeviceChoice("sim").setStorePath(storePath).setWarmupLaunches(0)
          .setJvmOptions(List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"))
          .setEnvironment(Map.of("THAW_DEVICE", "sim")));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("chat", new FunctionOptions().setImage("chat:1")),
          store, new PoolInstances(pool, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        // The end of turn is banned, so the completion runs to max_tokens.
        String ask = "{\"model\": \"chat\", \"max_tokens\": 12, \"temperature\": 0, \"logit_bias\": {\""
            + ChatModel.EOT + "\": -100}, \"messages\": [{\"role\": \"user\", \"content\": \"hello world\"}]";
        HttpResponse<String> whole = postJson(port, "/v1/chat/completions", ask + "}");
        assertEquals(200, whole.statusCode(), whole.body());
        String expected = json(whole).get("choices").get(0).get("message").get("content").asText();

        StringBuilder text = new StringBuilder();
        int contentEvents = 0;
        JsonNode usage = null;
        String finish = null;
        try (SseClient c = SseClient.post(port, "/v1/chat/completions", ask + ", \"stream\": true, "
            + "\"stream_options\": {\"include_usage\": true}}")) {
          assertEquals(200, c.status);
          for (String e = c.next(); e != null && !e.equals("[DONE]"); e = c.next()) {
            JsonNode chunk = JSON.readTree(e);
            if (chunk.hasNonNull("usage")) {
              usage = chunk.get("usage");
            }
            for (JsonNode choice : chunk.path("choices")) {
              String piece = choice.path("delta").path("content").asText("");
              if (!piece.isEmpty()) {
                contentEvents++;
                text.append(piece);
              }
              if (choice.hasNonNull("finish_reason")) {
                finish = choice.get("finish_reason").asText();
              }
            }
          }
        }
        assertEquals(expected, text.toString());
        assertEquals("length", finish);
        assertEquals(12, usage.get("completion_tokens").asInt());
        assertTrue(contentEvents > 1, "the text came in " + contentEvents + " events, not one");
      }
    }
  }
}
