package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import dev.thaw.examples.transformer.ArgmaxSim;
import dev.thaw.examples.transformer.FunctionChecks.Snapshot;
import dev.thaw.examples.transformer.FunctionChecks;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.runtime.speculation.AccessProfile;
import dev.thaw.runtime.speculation.Profiler;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The function on the sim device against the CPU reference (both families of test shape, both 16-bit types,
 * prompt passes on the tensor-core product and decode steps on the weight-streaming one), its request and
 * config checks, the SPI round trip from a sharded checkpoint, and profiling: every kernel exact.
 */
class LlamaFunctionTest {

  static JsonNode json(String s) {
    return FunctionChecks.json(s);
  }

  static int[][] tokens(JsonNode response) {
    return FunctionChecks.tokens(response);
  }

  /** Logits agree to 16-bit tolerance: each within 2e-2 of its size plus 2e-3 of the row's RMS. */
  static void assertLogitsClose(float[] expected, JsonNode got, String what) {
    FunctionChecks.assertLogitsClose(expected, got, what, 2e-2, 2e-3);
  }

  static int[][] prompts(int batch, int length, int vocab, long seed) {
    Random r = new Random(seed);
    int[][] p = new int[batch][length];
    for (int[] row : p) {
      for (int i = 0; i < length; i++) {
        row[i] = r.nextInt(vocab);
      }
    }
    return p;
  }

  /**
   * The function's greedy tokens against the reference followed along them: each is the reference's argmax, or
   * a token whose reference logit is within the logits' tolerance of the maximum (a near tie that 16-bit
   * rounding decides, e.g. the kernels' rounding of attention weights). The last step's logits, in the same
   * context on both sides, agree to that tolerance.
   */
  static void assertGreedyAgrees(LlamaReference ref, int[][] prompts, JsonNode got, String what) {
    int[][] ids = tokens(got);
    LlamaReference.Path path = ref.follow(prompts, ids);
    for (int b = 0; b < prompts.length; b++) {
      float[][] steps = path.steps()[b];
      for (int s = 0; s < ids[b].length; s++) {
        float[] e = steps[s];
        int best = ArgmaxSim.argmax(e, e.length);
        int chose = ids[b][s];
        double tol = 2e-2 * Math.abs(e[best]) + 2e-3 * rms(e);
        assertTrue(chose == best || (chose >= 0 && chose < e.length && e[best] - e[chose] <= tol), what
            + " sequence " + b + " step " + s + ": greedy token " + chose + " where the reference's best is " + best
            + " (" + e[best] + " vs " + (chose >= 0 && chose < e.length ? e[chose] : Float.NaN) + ", tie within "
            + tol + ")");
      }
      assertLogitsClose(steps[Math.max(0, ids[b].length - 1)], got.get("logits").get(b), what + " sequence " + b);
    }
  }

  private static double rms(float[] v) {
    double s = 0;
    for (float x : v) {
      s += (double) x * x;
    }
    return Math.sqrt(s / v.length);
  }

  private static void checkAgainstReference(String model, String dtype, int[][] prompts, int maxNew, int maxBatch)
      throws Exception {
    LlamaConfig config = LlamaConfig.named(model).withType(HalfType.parse(dtype));
    LlamaReference ref = LlamaReference.load(new SeededLlamaWeights(config, 7));
    LlamaFunction f = new LlamaFunction();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, json("{\"model\": \"" + model + "\", \"seed\": 7, \"dtype\": \""
          + dtype + "\", \"maxBatch\": " + maxBatch + ", \"maxTokens\": 40}"));
      JsonNode got = f.invoke(session, s, FunctionRequest.of(TokenRequest.body(prompts, maxNew, true))).json();
      assertGreedyAgrees(ref, prompts, got, model + " " + dtype);
    }
  }

  /** A checkpoint of {@code config} (seed 7) saved into {@code dir}, served from there, against the reference. */
  private static void checkCheckpointAgainstReference(LlamaConfig config, Path dir, int[][] prompts, int maxNew,
      int maxBatch, int maxTokens) throws Exception {
    SeededLlamaWeights weights = new SeededLlamaWeights(config, 7);
    LlamaCheckpoint.save(weights, dir, 1);
    LlamaReference ref = LlamaReference.load(weights);
    LlamaFunction f = new LlamaFunction();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, json("{\"path\": \"" + dir + "\", \"maxBatch\": " + maxBatch
          + ", \"maxTokens\": " + maxTokens + "}"));
      JsonNode got = f.invoke(session, s, FunctionRequest.of(TokenRequest.body(prompts, maxNew, true))).json();
      assertGreedyAgrees(ref, prompts, got, config.name());
    }
  }

  /** tiny's shape with 64-wide heads (flash attention's) and a longer context. */
  static LlamaConfig headSize64(HalfType type, int layers) {
    LlamaConfig t = LlamaConfig.named("tiny");
    return new LlamaConfig("tiny-d64", t.architecture(), 128, layers, 4, 2, 64, 256, 97, 1024, t.rmsNormEps(),
        t.ropeTheta(), t.ropeScaling(), false, false, t.slidingWindow(), type).validate();
  }

  @Test
  void headSize64PromptsRunFlashAttentionAndMatchTheReference(@TempDir Path dir) throws Exception {
    // 70 + 5 + 40 = 115 prompt rows: the 64x64 product, fused SwiGLU, flash attention tiles that span two
    // sequences; then split-KV decode.
    int[][] prompts = {prompts(1, 70, 97, 4)[0], {1, 2, 3, 4, 5}, prompts(1, 40, 97, 5)[0]};
    checkCheckpointAgainstReference(headSize64(HalfType.BF16, 2), dir, prompts, 5, 3, 128);
  }

  @Test
  void aContextLongerThanTheScoresKernelsServesOnFlashAttention(@TempDir Path dir) throws Exception {
    // maxTokens over LlamaKernels.MAX_CONTEXT: only the row-of-scores kernel is bound by it, not the cache append.
    LlamaConfig d64 = headSize64(HalfType.BF16, 1);
    LlamaConfig longer = new LlamaConfig("tiny-d64-8k", d64.architecture(), 128, 1, 4, 2, 64, 256, 97, 8192,
        d64.rmsNormEps(), d64.ropeTheta(), d64.ropeScaling(), false, false, d64.slidingWindow(), d64.type())
        .validate();
    int[][] prompts = {prompts(1, 9, 97, 4)[0]};
    checkCheckpointAgainstReference(longer, dir, prompts, 4, 1, LlamaKernels.MAX_CONTEXT + 904);
  }

  @Test
  void llamaWithLlama3RopeScalingMatchesTheCpuReference() throws Exception {
    // 2 x 3 prompt rows: the prompt pass streams weights too (M <= 8).
    checkAgainstReference("tiny", "bf16", prompts(2, 3, 97, 1), 12, 2);
  }

  @Test
  void raggedQwen2PromptsWithBiasesAndTiedEmbeddingsMatchTheReference() throws Exception {
    // 4 + 1 + 9 + 20 = 34 prompt rows: the prompt pass runs on the tensor-core product.
    int[][] prompts = {{5, 17, 100, 3}, {99}, {9, 9, 9, 9, 9, 9, 9, 9, 60}, prompts(1, 20, 101, 3)[0]};
    checkAgainstReference("tiny-qwen2", "bf16", prompts, 6, 4);
  }

  @Test
  void fp16WeightsMatchTheReference() throws Exception {
    checkAgainstReference("tiny", "fp16", prompts(3, 11, 97, 2), 5, 3);
  }

  @Test
  void withNoNewTokensTheLogitsAreThePromptsLastPosition() throws Exception {
    checkAgainstReference("tiny-qwen2", "bf16", prompts(1, 5, 101, 2), 0, 1);
  }

  @Test
  void everyLaunchGoesThroughTheSessionAndBadRequestsLaunchNothing() throws Exception {
    LlamaFunction f = new LlamaFunction();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, json("{\"model\": \"tiny\", \"maxBatch\": 2, \"maxTokens\": 32}"));
      AtomicInteger launches = new AtomicInteger();
      session.setLaunchInterceptor((kernel, grid, block, shared, stream, args) -> launches.incrementAndGet());
      JsonNode good = json("{\"tokens\": [[1, 2, 3], [4, 5, 6]], \"maxNewTokens\": 4}");
      JsonNode first = f.invoke(session, s, FunctionRequest.of(good)).json();
      int prompt = 1 + 9 * s.config().layers();
      int step = 1 + 10 * s.config().layers(); // split-KV attention is two launches
      // prompt pass + one final norm per sequence + head (2); then 3 steps of forward + norm + head
      assertEquals(prompt + 2 + 2 + 3 * (step + 1 + 2), launches.get());

      String[] bad = {
          "{\"tokens\": [[1, 97]]}",
          "{\"tokens\": [[1, -1]]}",
          "{\"tokens\": [[1], [2], [3]]}",
          "{\"tokens\": [[1, 2]], \"maxNewTokens\": 31}",
          "{\"tokens\": [[]]}",
          "{\"tokens\": [[1, 2]], \"temperature\": 3}",
      };
      String[] says = {"97 is not a token id in [0, 97)", "-1 is not a token id", "1 to 2 (maxBatch)",
          "exceeds the 32 positions", "prompt 0 is empty", "'temperature' must be a number in [0, 2]"};
      FunctionChecks.assertRefusesRequests(f, session, s, launches, good, first, bad, says);
    }
  }

  @Test
  void refusesConfigsItCannotBuild() throws Exception {
    LlamaFunction f = new LlamaFunction();
    String[] bad = {
        "{}", "{\"model\": \"tiny\", \"path\": \"/x\"}", "{\"model\": \"llama-9\"}",
        "{\"model\": \"tiny\", \"maxTokens\": 65}", "{\"model\": \"tiny\", \"dtype\": \"fp32\"}",
        "{\"path\": \"/x\", \"dtype\": \"bf16\"}", "{\"model\": \"tiny\", \"maxBatch\": 0}",
        "{\"model\": \"tiny\", \"temperature\": 1}", "{\"path\": \"/no/such/dir\"}"};
    String[] says = {"exactly one of", "exactly one of", "'llama-9'", "'maxTokens' must be an integer in [1, 64]",
        "'dtype' must be", "'dtype' goes with 'model'", "'maxBatch'", "unknown config field 'temperature'",
        "config.json does not exist"};
    FunctionChecks.assertRefusesConfigs(f, bad, says);
  }

  /**
   * The SPI's point: init's table, device bytes and state JSON rebuild a session on another (simulated) device
   * that serves the same response without init. The weights come from a sharded checkpoint.
   */
  @Test
  void aRebuiltSessionFromAShardedCheckpointServesTheSameResponseWithoutInit(@TempDir Path dir) throws Exception {
    LlamaCheckpoint.save(new SeededLlamaWeights(LlamaConfig.named("tiny-qwen2"), 3), dir, 3);
    LlamaFunction f = new LlamaFunction();
    JsonNode request = TokenRequest.body(new int[][] {{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3, 5, 8, 9, 7, 9}}, 5, true);
    JsonNode config = json("{\"path\": \"" + dir + "\", \"maxBatch\": 2, \"maxTokens\": 24}");
    Snapshot snapshot = FunctionChecks.assertRebuiltSessionServesTheSame(f, config, request);
    SessionTable table = snapshot.table();
    JsonNode stateJson = snapshot.state();
    assertEquals("model.embed_tokens.weight", table.allocations().get(0).name());
    assertEquals("model.layers.0.self_attn.qkv_proj.weight", table.allocations().get(2).name());
    assertEquals("model.layers.0.self_attn.qkv_proj.bias", table.allocations().get(3).name());
    assertEquals(2, stateJson.get("kCache").size());
    assertEquals(dir.toString(), stateJson.get("weights").asText());
  }

  /** What the image builder does with sample requests: every kernel is exact on the sim device. */
  @Test
  void profilingFindsEveryKernelExact() throws Exception {
    LlamaFunction f = new LlamaFunction();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, json("{\"model\": \"tiny-qwen2\", \"maxBatch\": 2, "
          + "\"maxTokens\": 32}"));
      List<FunctionRequest> samples = List.of(
          FunctionRequest.of(TokenRequest.body(new int[][] {prompts(1, 12, 101, 5)[0], {1, 2, 3}}, 4, true)),
          FunctionRequest.of(TokenRequest.body(new int[][] {{7}}, 3, false)));
      AccessProfile profile = Profiler.profile("llama-test", f, session, s, samples);
      // 16-wide heads: the prompt's attention is llama_attention; 15 prompt rows take the smallest tile.
      assertEquals(kernels(LlamaKernels.EMBED, LlamaKernels.RMSNORM, LlamaKernels.GEMV, LlamaKernels.GEMV1,
          GemmTile.SMALL.entry(), LlamaKernels.ROPE_KV, LlamaKernels.ATTENTION, LlamaKernels.FLASH_DECODE,
          LlamaKernels.FLASH_COMBINE, LlamaKernels.SWIGLU, LlamaKernels.ARGMAX), profile.kernels().keySet());
      profile.kernels().forEach((name, k) -> assertEquals(AccessProfile.Verdict.EXACT, k.verdict(),
          name + ": " + k.reasons()));
      assertEquals(session.table().allocations().size(), profile.firstTouch().size(),
          "every buffer is an argument of some launch: " + profile.firstTouch());
    }
  }

  /**
   * The prefill kernels of 64-wide heads, at the prompt sizes that pick each product tile, on a one-SM device (so
   * that a tiny model's products fill "waves" as an 8B's fill an H200), both builds of the module: compute
   * capability 8.0 (mma.sync tiles) and 9.0 (wgmma tiles, their dynamic shared memory opted in): all exact.
   */
  @ParameterizedTest
  @ValueSource(ints = {80, 90})
  void profilingFindsTheTensorCoreKernelsExact(int capability, @TempDir Path dir) throws Exception {
    LlamaCheckpoint.save(new SeededLlamaWeights(headSize64(HalfType.FP16, 1), 3), dir, 1);
    LlamaFunction f = new LlamaFunction();
    SimOptions options = new SimOptions().setComputeCapability(capability / 10, capability % 10).setMultiprocessorCount(1);
    try (SimDriver driver = SimDriver.open(options); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, json("{\"path\": \"" + dir + "\", \"maxBatch\": 2, "
          + "\"maxTokens\": 720}"));
      List<FunctionRequest> samples = List.of(
          FunctionRequest.of(TokenRequest.body(prompts(1, 700, 97, 6), 1, false)),
          FunctionRequest.of(TokenRequest.body(prompts(1, 200, 97, 8), 1, false)),
          FunctionRequest.of(TokenRequest.body(new int[][] {prompts(1, 70, 97, 7)[0], {4, 5, 6}}, 3, true)),
          FunctionRequest.of(TokenRequest.body(prompts(1, 20, 97, 9), 1, false)));
      AccessProfile profile = Profiler.profile("llama-test-d64", f, session, s, samples);
      Set<String> got = profile.kernels().keySet();
      // 700 / 200 / 73 / 20 rows: wgmma 128x256 / 128x128 / 64x128 and mma.sync 64x64 on 9.0; mma.sync
      // 128x128 (from 65 rows) and 64x64 on 8.0.
      List<GemmTile> tiles = capability == 90
          ? List.of(GemmTile.WGMMA_LARGE, GemmTile.WGMMA_MEDIUM, GemmTile.WGMMA_SMALL, GemmTile.MEDIUM)
          : List.of(GemmTile.LARGE, GemmTile.MEDIUM);
      List<String> expected = new ArrayList<>(List.of(LlamaKernels.FLASH_ATTENTION, LlamaKernels.FLASH_DECODE,
          LlamaKernels.FLASH_COMBINE));
      tiles.forEach(t -> expected.add(t.entry()));
      for (String k : expected) {
        assertTrue(got.contains(LlamaFunction.MODULE + "/" + k), k + " not launched: " + got);
      }
      for (GemmTile t : GemmTile.values()) {
        assertEquals(tiles.contains(t), got.contains(LlamaFunction.MODULE + "/" + t.entry()), t + " in " + got);
      }
      profile.kernels().forEach((name, k) -> assertEquals(AccessProfile.Verdict.EXACT, k.verdict(),
          name + ": " + k.reasons()));
    }
  }

  private static Set<String> kernels(String... entries) {
    Set<String> out = new TreeSet<>();
    for (String k : entries) {
      out.add(LlamaFunction.MODULE + "/" + k);
    }
    return out;
  }

  /** Text in and out through the checkpoint's tokenizer.json: the same ids as the token request, decoded. */
  @Test
  void textRequestsAreTokenizedWithTheCheckpointsTokenizer(@TempDir Path dir) throws Exception {
    LlamaConfig t = LlamaConfig.named("tiny");
    LlamaConfig withBytes = new LlamaConfig("tiny-text", t.architecture(), t.hiddenSize(), t.layers(), t.heads(),
        t.kvHeads(), t.headDim(), t.intermediateSize(), 320, t.maxPositions(), t.rmsNormEps(), t.ropeTheta(),
        t.ropeScaling(), t.tieEmbeddings(), t.qkvBias(), t.slidingWindow(), t.type()).validate();
    LlamaCheckpoint.save(new SeededLlamaWeights(withBytes, 4), dir, 1);
    ByteLevelBpe bpe = ByteLevelBpe.load(ByteLevelBpeTest.write(dir));
    LlamaFunction f = new LlamaFunction();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, json("{\"path\": \"" + dir + "\", \"maxBatch\": 2, "
          + "\"maxTokens\": 32}"));
      JsonNode byText = f.invoke(session, s, FunctionRequest.of(json(
          "{\"text\": [\"hello world\", \"or\"], \"maxNewTokens\": 6}"))).json();
      int[][] prompts = {bpe.encode("hello world"), bpe.encode("or")};
      JsonNode byIds = f.invoke(session, s, FunctionRequest.of(TokenRequest.body(prompts, 6, false))).json();
      assertEquals(byIds.get("tokens"), byText.get("tokens"));
      for (int b = 0; b < 2; b++) {
        assertEquals(bpe.decode(tokens(byIds)[b], true), byText.get("text").get(b).asText());
      }
      assertTrue(assertThrows(InvalidRequestException.class, () -> f.invoke(session, s, FunctionRequest.of(json(
          "{\"text\": \"hi\", \"tokens\": [[1]]}")))).getMessage().contains("not both"));
      assertTrue(assertThrows(InvalidRequestException.class, () -> f.invoke(session, s, FunctionRequest.of(json(
          "{\"text\": 3}")))).getMessage().contains("'text' must be a string"));
    }
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, json("{\"model\": \"tiny\", \"maxBatch\": 1, \"maxTokens\": 16}"));
      InvalidRequestException e = assertThrows(InvalidRequestException.class, () -> f.invoke(session, s,
          FunctionRequest.of(json("{\"text\": \"hello\"}"))));
      assertTrue(e.getMessage().contains("no tokenizer.json"), e.getMessage());
    }
  }
}
