package dev.thaw.examples.mlp;

import static dev.thaw.examples.mlp.MlpTesting.json;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.ptx.instrument.InstrumentationException;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import dev.thaw.runtime.speculation.AccessProfile;
import dev.thaw.runtime.speculation.AccessProfiler;
import dev.thaw.runtime.speculation.Profiling;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The mlp function profiled on a GPU: responses identical to unprofiled ones, and {@code mlp_linear} judged as the
 * instrumenter allows. Today {@link PtxInstrumenter} refuses its TF32 {@code wmma.load} on generic addresses, so
 * the kernel must be {@code unsafe} with that refusal as its reason (never silently trusted); once the instrumenter
 * takes it, it must be {@code exact}. Prints the profiling overhead ({@code gpu profiling overhead: ...}).
 * Skipped, with the reason, where no GPU is usable.
 */
class MlpFunctionGpuProfileTest {

  private static final String KERNEL = MlpFunction.MODULE + "/" + MlpSimKernels.Linear.ENTRY;

  @BeforeEach
  void needsAGpu() {
    DriverAvailability a = CudaDriver.availability();
    Assumptions.assumeTrue(a.available(), () -> "no usable GPU: " + a.unavailabilityCause());
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {"{}|33", "{\"layers\": [784, 512, 512, 10], \"maxBatch\": 256}|200"})
  void responsesAreThoseOfAnUnprofiledRunAndTheKernelIsJudgedAsTheInstrumenterAllows(String config, int rows)
      throws Exception {
    MlpFunction f = new MlpFunction();
    try (CudaDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json(config));
      List<FunctionRequest> samples = List.of(
          MlpTesting.request(MlpTesting.input(rows * 31L + 5, rows, s.inputs()), s.inputs()),
          MlpTesting.request(MlpTesting.input(11, 1, s.inputs()), s.inputs()));
      for (FunctionRequest r : samples) {
        f.invoke(session, s, r);
      }
      List<JsonNode> plain = new ArrayList<>();
      long t0 = System.nanoTime();
      for (FunctionRequest r : samples) {
        plain.add(f.invoke(session, s, r).json());
      }
      long plainNs = System.nanoTime() - t0;

      List<JsonNode> profiled = new ArrayList<>();
      AccessProfile profile;
      long a0 = System.nanoTime();
      long attachNs;
      long profiledNs;
      try (AccessProfiler p = Profiling.attach(session)) {
        attachNs = System.nanoTime() - a0;
        long t1 = System.nanoTime();
        for (FunctionRequest r : samples) {
          profiled.add(f.invoke(session, s, r).json());
        }
        profiledNs = System.nanoTime() - t1;
        profile = p.finish("mlp-profile-test");
      }

      assertEquals(plain, profiled, config + ": profiling must not change a response");
      assertEquals(Set.of(KERNEL), profile.kernels().keySet());
      AccessProfile.KernelProfile k = profile.kernels().get(KERNEL);
      String refusal = refusal(session.moduleRecord(MlpFunction.MODULE).ptx());
      if (refusal == null) {
        assertEquals(AccessProfile.Verdict.EXACT, k.verdict(), config + ": " + k.reasons());
      } else {
        assertEquals(AccessProfile.Verdict.UNSAFE, k.verdict(), config + ": a kernel that was not checked");
        assertEquals(List.of("not validated: module '" + MlpFunction.MODULE + "' cannot be instrumented: " + refusal),
            k.reasons());
      }
      double plainMs = plainNs / 1e6 / samples.size();
      double profiledMs = profiledNs / 1e6 / samples.size();
      System.out.printf("gpu profiling overhead [%s]: mlp %s x%d: plain %.2f ms/request, profiled %.2f ms/request "
          + "(%.1fx), %d launches in %d requests; attach (instrument + JIT) %.1f ms; %s: %s%n", ctx.device().name(),
          s.layers(), rows, plainMs, profiledMs, profiledMs / plainMs, profile.launches(), samples.size(),
          attachNs / 1e6, KERNEL, refusal == null ? "instrumented" : "not instrumented (" + refusal + ")");
    }
  }

  /** Why the instrumenter refuses {@code ptx}, or null when it takes it. */
  private static String refusal(String ptx) {
    try {
      PtxInstrumenter.instrument(ptx);
      return null;
    } catch (InstrumentationException e) {
      return e.getMessage();
    }
  }
}
