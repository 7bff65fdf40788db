package dev.thaw.examples.gpt2;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.function.CudaAndSim;
import dev.thaw.examples.function.ProfiledRun;
import dev.thaw.examples.gpt2.kernels.Gpt2Kernels;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.speculation.AccessProfile;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * GPT-2 profiled on a GPU, as the image build will: every one of the 8 kernels {@code exact} (each launch stayed
 * inside its speculated set, checked by PTX instrumentation), and responses, logits included, identical to
 * unprofiled ones. Prints the profiling overhead ({@code gpu profiling overhead: ...}). Skipped, with the
 * reason, where no GPU is usable.
 */
class Gpt2FunctionGpuProfileTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @BeforeEach
  void needsAGpu() {
    CudaAndSim.assumeGpu();
  }

  static Stream<String> configs() {
    return Stream.of("{\"model\": \"tiny\", \"seed\": 3, \"maxBatch\": 2, \"maxTokens\": 32}",
        "{\"model\": \"gpt2\", \"seed\": 1, \"maxBatch\": 2, \"maxTokens\": 64}");
  }

  /** Two prompts of different lengths with logits, and one prompt with no new token (the prompt pass only). */
  private static List<FunctionRequest> samples() {
    return List.of(
        FunctionRequest.of(Gpt2FunctionRequests.of(new int[][] {{5, 17, 42, 8, 90}, {1, 2, 3}}, 4, true)),
        FunctionRequest.of(Gpt2FunctionRequests.of(new int[][] {{60, 61, 62, 63, 64, 65, 66}}, 0, true)),
        FunctionRequest.of(Gpt2FunctionRequests.of(new int[][] {{7}}, 6, false)));
  }

  @ParameterizedTest
  @MethodSource("configs")
  void everyKernelIsExactAndResponsesAreThoseOfAnUnprofiledRun(String config) throws Exception {
    Gpt2Function f = new Gpt2Function();
    List<FunctionRequest> samples = samples();
    try (CudaDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      Gpt2Function.State s = f.init(session, JSON.readTree(config));
      ProfiledRun run = ProfiledRun.of(config, session, samples, r -> f.invoke(session, s, r).json(),
          "gpt2-profile-test");
      AccessProfile profile = run.profile();
      Set<String> expected = new TreeSet<>();
      for (String k : List.of(Gpt2Kernels.EMBED, Gpt2Kernels.LAYERNORM, Gpt2Kernels.MATMUL,
          Gpt2Kernels.MATMUL_RESIDUAL, Gpt2Kernels.KV_APPEND, Gpt2Kernels.ATTENTION, Gpt2Kernels.LM_HEAD,
          Gpt2Kernels.ARGMAX)) {
        expected.add(Gpt2Function.MODULE + "/" + k);
      }
      assertEquals(expected, profile.kernels().keySet(), config);
      run.assertEveryKernelExact(config, session);
      run.printOverhead(ctx, "gpt2", s.config().name());
    }
  }
}
