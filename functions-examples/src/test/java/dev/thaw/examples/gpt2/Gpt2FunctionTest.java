package dev.thaw.examples.gpt2;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.transformer.FunctionChecks.Snapshot;
import dev.thaw.examples.transformer.FunctionChecks;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The function on the sim device against the CPU reference, its request checks, and the SPI round trip. */
class Gpt2FunctionTest {

  static JsonNode json(String s) {
    return FunctionChecks.json(s);
  }

  static ObjectNode request(int[][] prompts, int maxNewTokens, boolean logits) {
    return Gpt2FunctionRequests.of(prompts, maxNewTokens, logits);
  }

  static int[][] tokens(JsonNode response) {
    return FunctionChecks.tokens(response);
  }

  /** Logits agree to fp16 tolerance: each within 1e-2 of its size plus 1e-3 of the row's RMS. */
  static void assertLogitsClose(float[] expected, JsonNode got, String what) {
    FunctionChecks.assertLogitsClose(expected, got, what, 1e-2, 1e-3);
  }

  private static int[][] prompts(int batch, int length, int vocab, long seed) {
    Random r = new Random(seed);
    int[][] p = new int[batch][length];
    for (int[] row : p) {
      for (int i = 0; i < length; i++) {
        row[i] = r.nextInt(vocab);
      }
    }
    return p;
  }

  private static void checkAgainstReference(String model, int[][] prompts, int maxNew, int maxBatch)
      throws Exception {
    Gpt2Reference ref = Gpt2Reference.load(new SeededWeights(Gpt2Config.named(model), 7));
    Gpt2Reference.Result expected = ref.generate(prompts, maxNew);
    Gpt2Function f = new Gpt2Function();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      Gpt2Function.State s = f.init(session, json("{\"model\": \"" + model + "\", \"seed\": 7, \"maxBatch\": "
          + maxBatch + ", \"maxTokens\": 32}"));
      JsonNode got = f.invoke(session, s, FunctionRequest.of(request(prompts, maxNew, true))).json();
      int[][] ids = tokens(got);
      for (int b = 0; b < prompts.length; b++) {
        assertArrayEquals(expected.tokens()[b], ids[b], model + " sequence " + b + ": greedy tokens");
        assertLogitsClose(expected.logits()[b], got.get("logits").get(b), model + " sequence " + b);
      }
    }
  }

  @Test
  void matchesTheCpuReferenceForABatchOfTwo() throws Exception {
    checkAgainstReference("tiny", prompts(2, 7, 97, 1), 12, 2);
  }

  @Test
  void raggedPromptsMatchTheReferenceOnAWiderModel() throws Exception {
    int[][] prompts = {{5, 17, 200, 3}, {250}, {9, 9, 9, 9, 9, 9, 9, 9, 100}};
    checkAgainstReference("tiny-wide", prompts, 6, 4);
  }

  @Test
  void itsEngineBatchesRequestsThatEachAnswerAsTheReferenceDoesAlone() throws Exception {
    int[][] prompts = {{5, 17, 200, 3}, {250}, {9, 9, 9, 9, 9, 9, 9, 9, 100}};
    int[] maxNew = {6, 3, 5};
    Gpt2Reference ref = Gpt2Reference.load(new SeededWeights(Gpt2Config.named("tiny-wide"), 7));
    Gpt2Function f = new Gpt2Function();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      Gpt2Function.State s = f.init(session, json("{\"model\": \"tiny-wide\", \"seed\": 7, \"maxBatch\": 3, "
          + "\"maxTokens\": 32}"));
      assertEquals(3, f.concurrency(s));
      try (FunctionEngine engine = f.engine(session, s)) {
        List<CompletableFuture<FunctionResponse>> all = new ArrayList<>();
        for (int b = 0; b < prompts.length; b++) {
          all.add(engine.submit(FunctionRequest.of(request(new int[][] {prompts[b]}, maxNew[b], true)),
              ResponseStream.unstreamed()));
        }
        for (int b = 0; b < prompts.length; b++) {
          JsonNode got = all.get(b).get(60, TimeUnit.SECONDS).json();
          Gpt2Reference.Result expected = ref.generate(new int[][] {prompts[b]}, maxNew[b]);
          assertArrayEquals(expected.tokens()[0], tokens(got)[0], "request " + b + ": greedy tokens");
          assertLogitsClose(expected.logits()[0], got.get("logits").get(0), "request " + b);
        }
      }
    }
  }

  @Test
  void withNoNewTokensTheLogitsAreThePromptsLastPosition() throws Exception {
    checkAgainstReference("tiny", prompts(1, 5, 97, 2), 0, 1);
  }

  @Test
  void everyLaunchGoesThroughTheSessionAndBadRequestsLaunchNothing() throws Exception {
    Gpt2Function f = new Gpt2Function();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      Gpt2Function.State s = f.init(session, json("{\"model\": \"tiny\", \"maxBatch\": 2, \"maxTokens\": 32}"));
      AtomicInteger launches = new AtomicInteger();
      session.setLaunchInterceptor((kernel, grid, block, shared, stream, args) -> launches.incrementAndGet());
      JsonNode good = json("{\"tokens\": [[1, 2, 3], [4, 5, 6]], \"maxNewTokens\": 4}");
      JsonNode first = f.invoke(session, s, FunctionRequest.of(good)).json();
      int layers = s.config().nLayer();
      int forward = 1 + 8 * layers;
      // prompt pass + one ln_f per sequence + head (2); then 3 steps of forward + ln_f + head
      assertEquals(forward + 2 + 2 + 3 * (forward + 1 + 2), launches.get());

      String[] bad = {
          "[1, 2]",
          "{}",
          "{\"tokens\": [[1, 2]], \"max_new_tokens\": 3}",
          "{\"tokens\": [1, 2, 3]}",
          "{\"tokens\": []}",
          "{\"tokens\": [[1], [2], [3]]}",
          "{\"tokens\": [[]]}",
          "{\"tokens\": [[1, 97]]}",
          "{\"tokens\": [[1, -1]]}",
          "{\"tokens\": [[1, 2.5]]}",
          "{\"tokens\": [[1, \"2\"]]}",
          "{\"tokens\": [[1, 4294967297]]}",
          "{\"tokens\": [[1, 2]], \"maxNewTokens\": -1}",
          "{\"tokens\": [[1, 2]], \"maxNewTokens\": \"4\"}",
          "{\"tokens\": [[1, 2]], \"maxNewTokens\": 31}",
          "{\"tokens\": [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33]], \"maxNewTokens\": 0}",
          "{\"tokens\": [[1, 2]], \"returnLogits\": 1}",
      };
      String[] says = {"JSON object", "'tokens'", "unknown field 'max_new_tokens'", "prompt 0 must be a list",
          "1 to 2 (maxBatch)", "1 to 2 (maxBatch)", "prompt 0 is empty", "97 is not a token id in [0, 97)",
          "-1 is not a token id", "2.5 is not a token id", "\"2\" is not a token id", "4294967297",
          "'maxNewTokens' must be an integer", "'maxNewTokens' must be an integer", "exceeds the 32 positions",
          "exceeds the 32 positions", "'returnLogits' must be true or false"};
      FunctionChecks.assertRefusesRequests(f, session, s, launches, good, first, bad, says);
    }
  }

  @Test
  void refusesConfigsItCannotBuild() throws Exception {
    Gpt2Function f = new Gpt2Function();
    String[] bad = {
        "{}", "{\"model\": \"tiny\", \"path\": \"/x\"}", "{\"model\": \"gpt5\"}", "{\"model\": 3}",
        "{\"model\": \"tiny\", \"maxBatch\": 0}", "{\"model\": \"tiny\", \"maxTokens\": 65}",
        "{\"model\": \"tiny\", \"seed\": \"x\"}", "{\"model\": \"tiny\", \"batch\": 2}",
        "{\"path\": \"/no/such/dir\"}", "[]"};
    String[] says = {"exactly one of", "exactly one of", "'gpt5'", "'model' must be a name", "'maxBatch'",
        "'maxTokens' must be an integer in [1, 64]", "'seed' must be an integer", "unknown config field 'batch'",
        "config.json does not exist", "JSON object"};
    FunctionChecks.assertRefusesConfigs(f, bad, says);
  }

  /**
   * The SPI's point, as in FunctionSessionTest: init's table, device bytes and state JSON rebuild a session on
   * another (simulated) device that serves the same response without init.
   */
  @Test
  void aRebuiltSessionServesTheSameResponseWithoutInit(@TempDir Path dir) throws Exception {
    HfCheckpoint.save(new SeededWeights(Gpt2Config.named("tiny"), 3), dir);
    Gpt2Function f = new Gpt2Function();
    JsonNode request = request(new int[][] {{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}}, 5, true);
    JsonNode config = json("{\"path\": \"" + dir + "\", \"maxBatch\": 2, \"maxTokens\": 24}");
    Snapshot snapshot = FunctionChecks.assertRebuiltSessionServesTheSame(f, config, request);
    SessionTable table = snapshot.table();
    JsonNode stateJson = snapshot.state();
    assertEquals("h.0.attn.c_attn.weight", table.allocations().get(4).name());
    assertEquals("wte.weight", table.allocations().get(0).name());
    assertEquals(2, stateJson.get("kCache").size());
    assertEquals(dir.toString(), stateJson.get("weights").asText());
  }
}
