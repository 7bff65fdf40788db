package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.function.CudaAndSim;
import dev.thaw.examples.function.ProfiledRun;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.kernels.GemmTiles;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.speculation.AccessProfile;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A Llama-family model profiled on a GPU, as the image build will: every kernel {@code exact} (each launch stayed
 * inside its speculated set, checked by PTX instrumentation), and responses, logits included, identical to
 * unprofiled ones. Prints the profiling overhead ({@code gpu profiling overhead: ...}). Skipped, with the
 * reason, where no GPU is usable.
 */
class LlamaFunctionGpuProfileTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @BeforeEach
  void needsAGpu() {
    CudaAndSim.assumeGpu();
  }

  static Stream<String> configs() {
    return Stream.of("{\"model\": \"tiny-qwen2\", \"seed\": 3, \"maxBatch\": 2, \"maxTokens\": 32}",
        "{\"model\": \"qwen2.5-0.5b\", \"seed\": 1, \"layers\": 2, \"maxBatch\": 2, \"maxTokens\": 768}",
        "{\"model\": \"llama-3.2-1b\", \"seed\": 1, \"layers\": 2, \"dtype\": \"fp16\", \"maxBatch\": 2, "
            + "\"maxTokens\": 768}");
  }

  /**
   * Two prompts of different lengths with logits (13 prompt rows), one prompt with no new token (the prompt pass
   * only), and where the context allows, prompts of 100 and 700 rows (larger product tiles).
   */
  private static List<FunctionRequest> samples(int maxTokens) {
    int[][] long1 = new int[1][700];
    int[][] mid = new int[2][50];
    for (int i = 0; i < 700; i++) {
      long1[0][i] = (i * 37 + 11) % 90;
      mid[i % 2][(i / 2) % 50] = (i * 13 + 5) % 90;
    }
    List<FunctionRequest> out = new ArrayList<>(List.of(
        FunctionRequest.of(TokenRequest.body(new int[][] {{5, 17, 42, 8, 90, 6, 7, 8, 9, 10}, {1, 2, 3}}, 4, true)),
        FunctionRequest.of(TokenRequest.body(new int[][] {{60, 61, 62, 63, 64, 65, 66}}, 0, true)),
        FunctionRequest.of(TokenRequest.body(new int[][] {{7}}, 6, false))));
    if (maxTokens >= 702) {
      out.add(FunctionRequest.of(TokenRequest.body(mid, 3, true)));
      out.add(FunctionRequest.of(TokenRequest.body(long1, 2, false)));
    }
    return out;
  }

  @ParameterizedTest
  @MethodSource("configs")
  void everyKernelIsExactAndResponsesAreThoseOfAnUnprofiledRun(String config) throws Exception {
    LlamaFunction f = new LlamaFunction();
    try (CudaDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      LlamaFunction.State s = f.init(session, JSON.readTree(config));
      List<FunctionRequest> samples = samples(s.maxTokens());
      ProfiledRun run = ProfiledRun.of(config, session, samples, r -> f.invoke(session, s, r).json(),
          "llama-profile-test");
      AccessProfile profile = run.profile();
      // Every kernel but the WMMA matmul (kept for comparisons), the 128-row flash prefill (from 4096 rows), one of
      // the two prompt attentions, by head size, and the product tiles the prompts do not pick.
      Set<String> expected = new TreeSet<>();
      for (String k : LlamaKernels.ENTRIES) {
        expected.add(LlamaFunction.MODULE + "/" + k);
      }
      expected.remove(LlamaFunction.MODULE + "/" + LlamaKernels.MATMUL);
      expected.remove(LlamaFunction.MODULE + "/" + LlamaKernels.FLASH_ATTENTION_WIDE);
      for (GemmTile t : GemmTile.values()) {
        expected.remove(LlamaFunction.MODULE + "/" + t.entry());
      }
      LlamaConfig c = s.config();
      GemmTiles tiles = GemmTiles.defaults(LlamaKernels.hopper(ctx.device()));
      for (int m : s.maxTokens() >= 702 ? new int[] {13, 100, 700} : new int[] {13}) {
        for (GemmTile t : List.of(tiles.pick(m, c.qkvWidth(), Epilogue.STORE, ctx.device().multiprocessorCount()),
            tiles.pick(m, c.hiddenSize(), Epilogue.RESIDUAL, ctx.device().multiprocessorCount()),
            tiles.pick(m, 2 * c.intermediateSize(), Epilogue.SWIGLU, ctx.device().multiprocessorCount()))) {
          expected.add(LlamaFunction.MODULE + "/" + t.entry());
        }
      }
      expected.remove(LlamaFunction.MODULE + "/" + (LlamaKernels.FLASH_HEAD_SIZES.contains(s.config().headDim())
          ? LlamaKernels.ATTENTION : LlamaKernels.FLASH_ATTENTION));
      assertEquals(expected, profile.kernels().keySet(), config);
      run.assertEveryKernelExact(config, session);
      run.printOverhead(ctx, "llama", s.config().name());
    }
  }
}
