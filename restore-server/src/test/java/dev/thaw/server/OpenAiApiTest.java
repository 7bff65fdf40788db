package dev.thaw.server;

import static dev.thaw.server.ServerFixture.JSON;
import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.examples.llama.ByteLevelBpe;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * OpenAI's API on a tiny Llama with a tokenizer and a chat template ({@link ChatModel}), served in process on the
 * sim device from the real store: chat and completions against the function's own answer for the same ids, models,
 * sampling by seed, n, stop strings, log-probabilities, echo, streamed events with usage, and every refusal in
 * OpenAI's error shape and status.
 */
class OpenAiApiTest {

  @TempDir
  static Path dir;

  static RocksChunkStore store;
  static SimDriver driver;
  static ThawServer server;
  static int port;
  static ByteLevelBpe bpe;

  @BeforeAll
  static void start() throws Exception {
    Path model = ChatModel.write(dir.resolve("llama"), true);
    Path plain = ChatModel.write(dir.resolve("plain"), false);
    bpe = ByteLevelBpe.load(model.resolve("tokenizer.json"));
    store = ServerFixture.openStore(dir.resolve("store"));
    ServerFixture.build(store, "chat:1", "dev.thaw.examples.llama.LlamaFunction", "{\"path\": \"" + model
        + "\", \"maxBatch\": 4, \"maxTokens\": 64}", null, 0);
    ServerFixture.build(store, "plain:1", "dev.thaw.examples.llama.LlamaFunction", "{\"path\": \"" + plain
        + "\", \"maxBatch\": 2, \"maxTokens\": 64}", null, 256L << 20);
    ServerFixture.buildMlp(store, "mlp:1");
    driver = SimDriver.open(new SimOptions());
    ServerOptions options = new ServerOptions().setPort(0).setStorePath(dir.resolve("store"))
        .addFunction("chat", new FunctionOptions().setImage("chat:1"))
        .addFunction("plain", new FunctionOptions().setImage("plain:1"))
        .addFunction("mlp", new FunctionOptions().setImage("mlp:1"));
    server = ThawServer.start(options, store, new InProcessInstances(driver, store));
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

  static JsonNode ok(HttpResponse<String> r) throws Exception {
    assertEquals(200, r.statusCode(), r.body());
    return json(r);
  }

  /** The function's own greedy answer for these ids, ending at its end-of-turn token as the API asks it to. */
  static int[] direct(int[] prompt, int max) throws Exception {
    StringBuilder ids = new StringBuilder();
    for (int t : prompt) {
      ids.append(ids.length() == 0 ? "" : ",").append(t);
    }
    JsonNode r = ok(postJson(port, "/v1/functions/chat/invoke", "{\"tokens\": [[" + ids + "]], \"maxNewTokens\": "
        + max + ", \"stopTokens\": [" + ChatModel.EOT + "]}"));
    JsonNode row = r.get("tokens").get(0);
    int[] out = new int[row.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = row.get(i).asInt();
    }
    return out;
  }

  @Test
  void modelsListTheLanguageModelsAndAnUnknownOneIs404() throws Exception {
    JsonNode list = ok(get(port, "/v1/models"));
    assertEquals("list", list.get("object").asText());
    List<String> ids = list.get("data").findValuesAsText("id");
    assertTrue(ids.containsAll(List.of("chat", "plain")) && !ids.contains("mlp"), ids.toString());
    JsonNode one = ok(get(port, "/v1/models/chat"));
    assertEquals("model", one.get("object").asText());
    assertEquals(64, one.get("max_model_len").asInt());
    for (String path : List.of("/v1/models/nope", "/v1/models/mlp")) {
      HttpResponse<String> r = get(port, path);
      assertEquals(404, r.statusCode(), path);
      assertEquals("model_not_found", json(r).get("error").get("code").asText());
    }
    HttpResponse<String> unknown = postJson(port, "/v1/embeddings", "{}");
    assertEquals(404, unknown.statusCode());
    JsonNode e = json(unknown).get("error");
    assertEquals("invalid_request_error", e.get("type").asText());
    assertTrue(e.has("param") && e.has("code"), e.toString());
  }

  @Test
  void chatRendersTheTemplateAndAnswersAsTheFunctionDoesForThoseIds() throws Exception {
    JsonNode c = ok(postJson(port, "/v1/chat/completions", "{\"model\": \"chat\", \"temperature\": 0, "
        + "\"max_tokens\": 8, \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", "
        + "\"content\": [{\"type\": \"text\", \"text\": \"hello\"}, {\"type\": \"text\", \"text\": \"world\"}]}]}"));
    assertEquals("chat.completion", c.get("object").asText());
    String prompt = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nbe brief<|eot_id|>"
        + "<|start_header_id|>user<|end_header_id|>\n\nhello\nworld<|eot_id|>"
        + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    int[] ids = bpe.encode(prompt, false);
    assertEquals(ids.length, c.get("usage").get("prompt_tokens").asInt());
    int[] expected = direct(ids, 8);
    JsonNode choice = c.get("choices").get(0);
    assertEquals("assistant", choice.get("message").get("role").asText());
    assertEquals(bpe.decode(expected, true), choice.get("message").get("content").asText());
    assertEquals(expected.length, c.get("usage").get("completion_tokens").asInt());
    boolean ended = expected[expected.length - 1] == ChatModel.EOT;
    assertEquals(ended ? "stop" : "length", choice.get("finish_reason").asText());
  }

  @Test
  void completionsSampleBySeedAndHonourNStopLogprobsAndEcho() throws Exception {
    String body = "{\"model\": \"chat\", \"prompt\": \"hello world\", \"max_tokens\": 10, \"temperature\": 1.0, "
        + "\"n\": 3, \"seed\": 42}";
    JsonNode a = ok(postJson(port, "/v1/completions", body));
    JsonNode b = ok(postJson(port, "/v1/completions", body));
    assertEquals(a.get("choices"), b.get("choices"), "one seed, one completion");
    assertEquals(3, a.get("choices").size());
    assertEquals(bpe.encode("hello world", true).length, a.get("usage").get("prompt_tokens").asInt());
    JsonNode other = ok(postJson(port, "/v1/completions", body.replace("42", "43")));
    assertNotEquals(a.get("choices"), other.get("choices"), "another seed, other draws");

    // A stop string cuts the text where it starts and ends the choice with "stop".
    JsonNode greedy = ok(postJson(port, "/v1/completions", "{\"model\": \"chat\", \"prompt\": \"hello\", "
        + "\"max_tokens\": 12, \"temperature\": 0, \"echo\": true}"));
    String text = greedy.get("choices").get(0).get("text").asText();
    assertTrue(text.startsWith("hello"), text);
    String generated = text.substring(5);
    if (generated.length() >= 3) {
      String stop = generated.substring(1, 3);
      JsonNode stopped = ok(postJson(port, "/v1/completions", "{\"model\": \"chat\", \"prompt\": \"hello\", "
          + "\"max_tokens\": 12, \"temperature\": 0, \"stop\": [" + JSON.writeValueAsString(stop) + "]}"));
      JsonNode choice = stopped.get("choices").get(0);
      assertEquals(generated.substring(0, generated.indexOf(stop)), choice.get("text").asText());
      assertEquals("stop", choice.get("finish_reason").asText());
    }

    JsonNode lp = ok(postJson(port, "/v1/completions", "{\"model\": \"chat\", \"prompt\": \"hello\", "
        + "\"max_tokens\": 4, \"temperature\": 0, \"logprobs\": 2}")).get("choices").get(0).get("logprobs");
    int n = lp.get("tokens").size();
    assertTrue(n > 0);
    assertEquals(n, lp.get("token_logprobs").size());
    assertEquals(n, lp.get("text_offset").size());
    for (int i = 0; i < n; i++) {
      double chosen = lp.get("token_logprobs").get(i).asDouble();
      assertTrue(chosen <= 0, lp.toString());
      JsonNode top = lp.get("top_logprobs").get(i);
      // Keyed by token text: ids this tiny vocabulary leaves without text share one key.
      assertTrue(top.size() >= 1 && top.size() <= 2, top.toString());
      // Greedy: the chosen token is the most likely one.
      for (JsonNode v : top) {
        assertTrue(chosen >= v.asDouble() - 1e-6, lp.toString());
      }
    }
    JsonNode chatLp = ok(postJson(port, "/v1/chat/completions", "{\"model\": \"chat\", \"max_tokens\": 3, "
        + "\"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 3, \"messages\": [{\"role\": \"user\", "
        + "\"content\": \"hi\"}]}")).get("choices").get(0).get("logprobs").get("content");
    assertTrue(chatLp.size() > 0);
    assertEquals(3, chatLp.get(0).get("top_logprobs").size());
    assertTrue(chatLp.get(0).has("bytes"));
  }

  @Test
  void streamedEventsAddUpToTheCompletionThenUsageThenDone() throws Exception {
    String chat = "{\"model\": \"chat\", \"max_tokens\": 8, \"temperature\": 0, \"messages\": [{\"role\": \"user\","
        + " \"content\": \"hello\"}]";
    String whole = ok(postJson(port, "/v1/chat/completions", chat + "}")).get("choices").get(0).get("message")
        .get("content").asText();
    HttpResponse<String> r = postJson(port, "/v1/chat/completions", chat
        + ", \"stream\": true, \"stream_options\": {\"include_usage\": true}}");
    assertEquals(200, r.statusCode(), r.body());
    assertEquals("text/event-stream", r.headers().firstValue("Content-Type").orElseThrow());
    List<String> events = r.body().lines().filter(l -> l.startsWith("data: ")).map(l -> l.substring(6)).toList();
    assertEquals("[DONE]", events.get(events.size() - 1));
    StringBuilder text = new StringBuilder();
    List<JsonNode> chunks = new ArrayList<>();
    for (String e : events.subList(0, events.size() - 1)) {
      chunks.add(JSON.readTree(e));
    }
    assertEquals("assistant", chunks.get(0).get("choices").get(0).get("delta").get("role").asText());
    for (JsonNode c : chunks.subList(0, chunks.size() - 1)) {
      assertEquals("chat.completion.chunk", c.get("object").asText());
      text.append(c.get("choices").get(0).get("delta").path("content").asText(""));
    }
    assertEquals(whole, text.toString());
    JsonNode usage = chunks.get(chunks.size() - 1);
    assertEquals(0, usage.get("choices").size());
    assertTrue(usage.get("usage").get("completion_tokens").asInt() > 0);
    assertFalse(chunks.get(chunks.size() - 2).get("choices").get(0).get("finish_reason").isNull());
  }

  @Test
  void badRequestsGetOpenAisErrorObjectAndStatus() throws Exception {
    String many = "x ".repeat(80);
    String[][] cases = {
        {"/v1/completions", "{\"model\": \"nope\", \"prompt\": \"a\"}", "404", "model_not_found"},
        {"/v1/completions", "{\"model\": \"mlp\", \"prompt\": \"a\"}", "400", "model_not_supported"},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": \"" + many + "\"}", "400", "context_length_exceeded"},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": \"a\", \"max_tokens\": 500}", "400",
            "context_length_exceeded"},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": \"a\", \"frobnicate\": 1}", "400", null},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": \"a\", \"temperature\": \"hot\"}", "400", null},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": \"a\", \"n\": 5}", "400", null},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": [\"a\", \"b\"], \"n\": 3}", "400", null},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": \"a\", \"stop\": 3}", "400", null},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": [400]}", "400", null},
        {"/v1/completions", "{\"model\": \"chat\", \"prompt\": \"a\", \"suffix\": \"b\"}", "400",
            "unsupported_parameter"},
        {"/v1/chat/completions", "{\"model\": \"chat\", \"messages\": []}", "400", null},
        {"/v1/chat/completions", "{\"model\": \"chat\", \"messages\": [{\"role\": \"wizard\", \"content\": \"a\"}]}",
            "400", null},
        {"/v1/chat/completions", "{\"model\": \"plain\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
            "400", null},
        {"/v1/chat/completions", "{\"model\": \"chat\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
            + "\"stream_options\": {\"include_usage\": true}}", "400", null},
    };
    for (String[] c : cases) {
      HttpResponse<String> r = postJson(port, c[0], c[1]);
      assertEquals(Integer.parseInt(c[2]), r.statusCode(), c[1] + " -> " + r.body());
      JsonNode e = json(r).get("error");
      assertTrue(e.get("message").isTextual() && e.has("type") && e.has("param") && e.has("code"), r.body());
      if (c[3] != null) {
        assertEquals(c[3], e.get("code").asText(), r.body());
      }
    }
  }
}
