package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.LlamaConfig.Architecture;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The tensor-parallel forward on four simulated peer devices: at 2 and 4 ranks, over shapes of the Llama family
 * (one and four query heads per key-value head, Qwen2's biases with a tied head, untied heads, flash prefill of head
 * size 64), the greedy ids are the single-device ids and the logits are within 16-bit tolerance of them; one rank is
 * bit for bit the function's own passes; a checkpoint folder and seeded weights give the same model; a split or a
 * placement that cannot work is refused naming why, before anything is allocated; a rank that fails in the middle of
 * a pass fails the request, releases the others and leaves the model serving.
 */
class LlamaTensorParallelTest {

  /** One query head per key-value head, an untied head, an odd vocabulary. Splits 2 and 4 ways. */
  static final LlamaConfig GQA1 = new LlamaConfig("tp-gqa1", Architecture.LLAMA, 64, 2, 4, 4, 32, 128, 97, 64,
      1e-5f, 10000, null, false, false, 0, HalfType.BF16);
  /** Four query heads per key-value head, q/k/v biases and a tied head (Qwen2). Splits 2 and 4 ways. */
  static final LlamaConfig GQA4_QWEN2 = new LlamaConfig("tp-gqa4-qwen2", Architecture.QWEN2, 64, 2, 16, 4, 16, 128,
      101, 64, 1e-6f, 1000000, null, true, true, 0, HalfType.BF16);
  /** Head size 64, so prompts run flash attention; llama3 rope scaling. Splits 2 ways. */
  static final LlamaConfig FLASH = new LlamaConfig("tp-flash", Architecture.LLAMA, 128, 2, 8, 2, 64, 256, 131, 128,
      1e-5f, 500000, new LlamaConfig.RopeScaling(8, 1, 4, 16), false, false, 0, HalfType.BF16);

  /** Two ragged prompts: 16 prompt rows (the tensor-core products), then steps of 2 rows (the GEMV ones). */
  static final int[][] PROMPTS = {{3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46}, {26, 43, 38, 32, 7}};
  static final int NEW_TOKENS = 6;

  static Stream<Arguments> splits() {
    return Stream.of(Arguments.of(GQA1, 2), Arguments.of(GQA1, 4), Arguments.of(GQA4_QWEN2, 2),
        Arguments.of(GQA4_QWEN2, 4), Arguments.of(FLASH, 2), Arguments.of(GQA1.withType(HalfType.FP16), 2));
  }

  private static SimDriver fourDevices() {
    return SimDriver.open(new SimOptions().setDeviceCount(4));
  }

  private static int[] devices(int n) {
    int[] d = new int[n];
    for (int i = 0; i < n; i++) {
      d[i] = i;
    }
    return d;
  }

  @ParameterizedTest(name = "{0} over {1} ranks")
  @MethodSource("splits")
  void theSplitModelChoosesTheSingleDeviceIdsWithLogitsWithin16BitTolerance(LlamaConfig config, int n)
      throws Exception {
    SeededLlamaWeights weights = new SeededLlamaWeights(config, 7);
    try (SimDriver driver = fourDevices()) {
      LlamaTensorParallel.Result one;
      try (LlamaTensorParallel single = LlamaTensorParallel.open(driver, devices(1), weights, 2, 40)) {
        one = single.generate(PROMPTS, NEW_TOKENS);
      }
      try (LlamaTensorParallel split = LlamaTensorParallel.open(driver, devices(n), weights, 2, 40)) {
        LlamaTensorParallel.Result tp = split.generate(PROMPTS, NEW_TOKENS);
        assertArrayEquals(one.tokens(), tp.tokens(), config.name() + " over " + n);
        for (int b = 0; b < PROMPTS.length; b++) {
          assertLogitsClose(one.logits()[b], tp.logits()[b], config.name() + " over " + n + " sequence " + b);
        }
      }
      assertEquals(0, driver.memoryInUse(), "a closed model leaves nothing on any device");
    }
  }

  /**
   * Within 16-bit tolerance, as the kernels are held to the CPU reference ({@code LlamaFunctionTest}): each logit
   * within 2e-2 of its size plus 2e-3 of the row's RMS. The split sums each o and down product as n partial sums
   * added in rank order instead of one fp32 sum; the difference is an fp32 rounding, but the next RMSNorm rounds its
   * output to the 16-bit type, where an element near a rounding boundary moves by one ulp (2^-8 of it in bf16) and
   * carries that through the layers above.
   */
  static void assertLogitsClose(float[] expected, float[] got, String what) {
    assertEquals(expected.length, got.length, what);
    double rms = 0;
    for (float e : expected) {
      rms += (double) e * e;
    }
    rms = Math.sqrt(rms / expected.length);
    for (int v = 0; v < expected.length; v++) {
      double tol = 2e-2 * Math.abs(expected[v]) + 2e-3 * rms;
      int at = v;
      assertTrue(Math.abs(got[v] - expected[v]) <= tol,
          () -> what + " logit " + at + ": expected " + expected[at] + ", got " + got[at]);
    }
  }

  @Test
  void oneRankIsTheFunctionsOwnPassesBitForBit() throws Exception {
    LlamaFunction f = new LlamaFunction();
    try (SimDriver driver = fourDevices()) {
      JsonNode got;
      try (GpuContext ctx = driver.createContext(0); FunctionSession session = FunctionSession.record(ctx)) {
        LlamaFunction.State s = f.init(session, LlamaFunctionTest.json("{\"model\": \"tiny-qwen2\", \"seed\": 7, "
            + "\"maxBatch\": 2, \"maxTokens\": 40}"));
        got = f.invoke(session, s, FunctionRequest.of(TokenRequest.body(PROMPTS, NEW_TOKENS, true))).json();
      }
      try (LlamaTensorParallel single = LlamaTensorParallel.open(driver, devices(1),
          new SeededLlamaWeights(LlamaConfig.named("tiny-qwen2"), 7), 2, 40)) {
        LlamaTensorParallel.Result one = single.generate(PROMPTS, NEW_TOKENS);
        assertArrayEquals(LlamaFunctionTest.tokens(got), one.tokens());
        for (int b = 0; b < PROMPTS.length; b++) {
          JsonNode row = got.get("logits").get(b);
          float[] expected = new float[row.size()];
          for (int v = 0; v < expected.length; v++) {
            expected[v] = (float) row.get(v).asDouble();
          }
          assertArrayEquals(expected, one.logits()[b], "sequence " + b);
        }
      }
    }
  }

  @Test
  void aCheckpointFolderAndTheSeededWeightsItWasSavedFromGiveTheSameSplitModel(@TempDir Path dir) throws Exception {
    SeededLlamaWeights seeded = new SeededLlamaWeights(GQA4_QWEN2, 7);
    LlamaCheckpoint.save(seeded, dir, 3);
    try (SimDriver driver = fourDevices(); LlamaCheckpoint checkpoint = LlamaCheckpoint.open(dir)) {
      LlamaTensorParallel.Result fromSeed;
      try (LlamaTensorParallel tp = LlamaTensorParallel.open(driver, devices(4), seeded, 2, 40)) {
        fromSeed = tp.generate(PROMPTS, NEW_TOKENS);
      }
      try (LlamaTensorParallel tp = LlamaTensorParallel.open(driver, devices(4), checkpoint, 2, 40)) {
        LlamaTensorParallel.Result fromFile = tp.generate(PROMPTS, NEW_TOKENS);
        assertArrayEquals(fromSeed.tokens(), fromFile.tokens());
        assertArrayEquals(fromSeed.logits(), fromFile.logits());
        assertEquals(dir.toString(), tp.weights());
      }
    }
  }

  @Test
  void aSplitThatDoesNotDivideTheModelOrAPlacementThatCannotHoldItIsRefusedBeforeAnythingIsAllocated() {
    try (SimDriver driver = fourDevices()) {
      // tiny has 2 key-value heads: not 4 ranks.
      InvalidConfigException kv = assertThrows(InvalidConfigException.class, () -> LlamaTensorParallel.open(driver,
          devices(4), new SeededLlamaWeights(LlamaConfig.named("tiny"), 1), 1, 16));
      assertTrue(kv.getMessage().contains("num_key_value_heads = 2 does not split over 4 ranks"), kv.getMessage());
      InvalidConfigException heads = assertThrows(InvalidConfigException.class, () -> LlamaTensorParallel.open(
          driver, devices(3), new SeededLlamaWeights(GQA1, 1), 1, 16));
      assertTrue(heads.getMessage().contains("num_attention_heads = 4 does not split over 3 ranks"),
          heads.getMessage());
      // An MLP 96 wide: 48 per rank is not a multiple of the products' K step.
      InvalidConfigException width = assertThrows(InvalidConfigException.class, () -> LlamaTensorParallel.open(
          driver, devices(2), new SeededLlamaWeights(new LlamaConfig("mlp-96", Architecture.LLAMA, 64, 1, 2, 2, 32,
              96, 97, 64, 1e-5f, 10000, null, false, false, 0, HalfType.BF16), 1), 1, 16));
      assertTrue(width.getMessage().contains("intermediate_size / ranks = 48"), width.getMessage());
      InvalidConfigException five = assertThrows(InvalidConfigException.class, () -> LlamaTensorParallel.open(driver,
          devices(5), new SeededLlamaWeights(GQA1, 1), 1, 16));
      assertTrue(five.getMessage().contains("1 to 4 ranks"), five.getMessage());
      InvalidConfigException context = assertThrows(InvalidConfigException.class, () -> LlamaTensorParallel.open(
          driver, devices(2), new SeededLlamaWeights(GQA1, 1), 1, 65));
      assertTrue(context.getMessage().contains("maxTokens"), context.getMessage());
      assertEquals(0, driver.memoryInUse());
    }
    try (SimDriver two = SimDriver.open(new SimOptions().setDeviceCount(2))) {
      IllegalArgumentException missing = assertThrows(IllegalArgumentException.class, () -> LlamaTensorParallel.open(
          two, devices(4), new SeededLlamaWeights(GQA1, 1), 1, 16));
      assertTrue(missing.getMessage().contains("no device 2: 2 visible, so at most 2 ranks"), missing.getMessage());
      IllegalArgumentException twice = assertThrows(IllegalArgumentException.class, () -> LlamaTensorParallel.open(
          two, new int[] {1, 1}, new SeededLlamaWeights(GQA1, 1), 1, 16));
      assertTrue(twice.getMessage().contains("named twice"), twice.getMessage());
      assertEquals(0, two.memoryInUse());
    }
    try (SimDriver apart = SimDriver.open(new SimOptions().setDeviceCount(2).setPeerAccess(false))) {
      IllegalArgumentException peers = assertThrows(IllegalArgumentException.class, () -> LlamaTensorParallel.open(
          apart, devices(2), new SeededLlamaWeights(GQA1, 1), 1, 16));
      assertTrue(peers.getMessage().contains("are not peers"), peers.getMessage());
      assertEquals(0, apart.memoryInUse());
    }
  }

  @Test
  void weightsThatFailToReadHalfwayFailTheOpenAndFreeEveryRanksMemory() throws Exception {
    SeededLlamaWeights seeded = new SeededLlamaWeights(GQA1, 7);
    AtomicInteger reads = new AtomicInteger();
    LlamaWeights failing = new LlamaWeights() {
      @Override
      public LlamaConfig config() {
        return seeded.config();
      }

      @Override
      public String describe() {
        return "failing";
      }

      @Override
      public void read(LlamaTensor tensor, long offset, ByteBuffer dst) throws IOException {
        if (reads.incrementAndGet() == 10) {
          throw new IOException("disk gone at " + tensor.name());
        }
        seeded.read(tensor, offset, dst);
      }

      @Override
      public void close() {}
    };
    try (SimDriver driver = fourDevices()) {
      IOException e = assertThrows(IOException.class, () -> LlamaTensorParallel.open(driver, devices(4), failing, 2,
          40));
      assertTrue(e.getMessage().startsWith("disk gone"), e.getMessage());
      assertEquals(0, driver.memoryInUse(), "every rank's weights, staging and group buffers are freed");
    }
  }

  @Test
  void aBadRequestIsRefusedBeforeAnyRankLaunches() throws Exception {
    try (SimDriver driver = fourDevices();
        LlamaTensorParallel tp = LlamaTensorParallel.open(driver, devices(2), new SeededLlamaWeights(GQA1, 7), 2,
            40)) {
      LlamaTensorParallel.Result before = tp.generate(PROMPTS, NEW_TOKENS);
      assertThrows(InvalidRequestException.class, () -> tp.generate(new int[][] {{1}, {2}, {3}}, 2), "3 > maxBatch");
      assertThrows(InvalidRequestException.class, () -> tp.generate(new int[][] {{97}}, 2), "id past the vocabulary");
      assertThrows(InvalidRequestException.class, () -> tp.generate(new int[][] {new int[39]}, 4), "past maxTokens");
      assertArrayEquals(before.tokens(), tp.generate(PROMPTS, NEW_TOKENS).tokens());
    }
  }

  @Test
  void aRankThatFailsInTheMiddleOfAPassFailsTheRequestReleasesTheOthersAndTheModelServesTheNext() throws Exception {
    AtomicInteger launchesLeft = new AtomicInteger(Integer.MAX_VALUE);
    try (SimDriver driver = fourDevices();
        LlamaTensorParallel tp = LlamaTensorParallel.open(driver, devices(4), new SeededLlamaWeights(GQA1, 7), 2, 40,
            (rank, module) -> rank == 2 ? new FailingModule(module, launchesLeft) : module)) {
      LlamaTensorParallel.Result before = tp.generate(PROMPTS, NEW_TOKENS);
      // Rank 2 fails at its 12th launch (the embedding, 8 per layer of a prompt pass): the second layer's rotary
      // step, after the first layer's two exchanges, which the others passed with it.
      launchesLeft.set(12);
      IllegalStateException e = assertThrows(IllegalStateException.class, () -> tp.generate(PROMPTS, NEW_TOKENS));
      assertEquals("injected launch failure", e.getMessage());
      assertEquals(3, e.getSuppressed().length, "the other ranks stopped at their next exchange: " + List.of(
          e.getSuppressed()));
      launchesLeft.set(Integer.MAX_VALUE);
      LlamaTensorParallel.Result after = tp.generate(PROMPTS, NEW_TOKENS);
      assertArrayEquals(before.tokens(), after.tokens());
      assertArrayEquals(before.logits(), after.logits());
    }
  }

  /** A module whose kernels throw at the launch that takes {@code left} to zero. */
  private record FailingModule(GpuModule module, AtomicInteger left) implements GpuModule {
    @Override
    public Optional<String> ptx() {
      return module.ptx();
    }

    @Override
    public byte[] cubin() {
      return module.cubin();
    }

    @Override
    public String jitLog() {
      return module.jitLog();
    }

    @Override
    public List<String> kernelNames() {
      return module.kernelNames();
    }

    @Override
    public Kernel kernel(String name) {
      Kernel k = module.kernel(name);
      return new Kernel() {
        @Override
        public String name() {
          return k.name();
        }

        @Override
        public GpuModule module() {
          return FailingModule.this;
        }

        @Override
        public ParamLayout params() {
          return k.params();
        }

        @Override
        public void setMaxDynamicSharedMemory(int bytes) {
          k.setMaxDynamicSharedMemory(bytes);
        }

        @Override
        public void launch(Dim3 grid, Dim3 block, int shared, GpuStream stream, KernelArgs args) {
          if (left.decrementAndGet() == 0) {
            throw new IllegalStateException("injected launch failure");
          }
          k.launch(grid, block, shared, stream, args);
        }

        @Override
        public void launch(Dim3 grid, Dim3 block, GpuStream stream, Object... args) {
          if (left.decrementAndGet() == 0) {
            throw new IllegalStateException("injected launch failure");
          }
          k.launch(grid, block, stream, args);
        }
      };
    }

    @Override
    public void close() {}
  }
}
