package dev.thaw.examples.function;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.speculation.AccessProfile;
import dev.thaw.runtime.speculation.AccessProfiler;
import dev.thaw.runtime.speculation.Profiling;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;

/**
 * A model function's sample requests run plain and then profiled, as the image build profiles them, for the
 * models' GPU profile tests: the responses must be identical and the launch order speculated; the caller checks
 * which kernels the profile saw, then {@link #assertEveryKernelExact} and {@link #printOverhead}.
 */
public record ProfiledRun(AccessProfile profile, int requests, long plainNs, long profiledNs, long attachNs) {

  /**
   * Runs {@code samples} once to warm up, once timed plain and once timed under a profiler attached to
   * {@code session} ({@code invoke} answers one request), and asserts the profiled answers are the plain ones.
   */
  public static ProfiledRun of(String config, FunctionSession session, List<FunctionRequest> samples,
      Function<FunctionRequest, JsonNode> invoke, String profileName) throws Exception {
    List<JsonNode> plain = new ArrayList<>();
    for (FunctionRequest r : samples) {
      invoke.apply(r); // warm: the timed pass below is steady state
    }
    long t0 = System.nanoTime();
    for (FunctionRequest r : samples) {
      plain.add(invoke.apply(r));
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
        profiled.add(invoke.apply(r));
      }
      profiledNs = System.nanoTime() - t1;
      profile = p.finish(profileName);
    }

    for (int i = 0; i < samples.size(); i++) {
      assertEquals(plain.get(i), profiled.get(i), config + ": request " + i + " answered differently when profiled");
    }
    assertEquals(AccessProfile.OrderSource.SPECULATED, profile.orderSource());
    return new ProfiledRun(profile, samples.size(), plainNs, profiledNs, attachNs);
  }

  /** Every kernel's verdict is {@code exact}, and every buffer of {@code session} is an argument of some launch. */
  public void assertEveryKernelExact(String config, FunctionSession session) {
    profile.kernels().forEach((name, k) -> assertEquals(AccessProfile.Verdict.EXACT, k.verdict(),
        config + ": " + name + ": " + k.reasons()));
    assertEquals(session.table().allocations().size(), profile.firstTouch().size(),
        config + ": every buffer is an argument of some launch: " + profile.firstTouch());
  }

  /** Prints {@code gpu profiling overhead [device]: <family> <model>: ...}. */
  public void printOverhead(GpuContext ctx, String family, String model) {
    double plainMs = plainNs / 1e6 / requests;
    double profiledMs = profiledNs / 1e6 / requests;
    System.out.printf("gpu profiling overhead [%s]: %s %s: plain %.2f ms/request, profiled %.2f ms/request "
        + "(%.1fx), %d launches in %d requests; attach (instrument + JIT) %.1f ms%n", ctx.device().name(), family,
        model, plainMs, profiledMs, profiledMs / plainMs, profile.launches(), requests, attachNs / 1e6);
  }
}
