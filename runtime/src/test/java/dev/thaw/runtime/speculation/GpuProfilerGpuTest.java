package dev.thaw.runtime.speculation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Profiling on a GPU ({@link GpuProfiler} through {@link Profiling}): exact kernels stay exact with unchanged
 * responses, and a kernel that reads a buffer speculation missed is unsafe, naming it, exactly as the sim's
 * {@link Profiler} says. Skipped, with the reason, where no GPU is usable.
 */
class GpuProfilerGpuTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @BeforeEach
  void needsAGpu() {
    DriverAvailability a = CudaDriver.availability();
    Assumptions.assumeTrue(a.available(), () -> "no usable GPU: " + a.unavailabilityCause());
  }

  /** A profile and the responses of the profiled invocations. */
  private record Run(AccessProfile profile, List<JsonNode> plain, List<JsonNode> profiled,
      List<GpuLaunchCheck> launches) {}

  /** Inits {@code f} on {@code driver}, serves {@code samples} plain, then again under {@link Profiling}. */
  private static <S> Run run(GpuDriver driver, ThawFunction<S> f, String config, List<FunctionRequest> samples)
      throws Exception {
    try (GpuContext ctx = driver.createContext(0); FunctionSession session = FunctionSession.record(ctx)) {
      S state = f.init(session, JSON.readTree(config));
      List<JsonNode> plain = new ArrayList<>();
      for (FunctionRequest r : samples) {
        plain.add(f.invoke(session, state, r).json());
      }
      List<JsonNode> profiled = new ArrayList<>();
      AccessProfile profile;
      List<GpuLaunchCheck> launches = List.of();
      try (AccessProfiler p = Profiling.attach(session)) {
        for (FunctionRequest r : samples) {
          profiled.add(f.invoke(session, state, r).json());
        }
        profile = p.finish("test");
        if (p instanceof GpuProfiler g) {
          launches = g.launches();
        }
      }
      assertNull(session.launchInterceptor(), "profiling detaches");
      return new Run(profile, plain, profiled, launches);
    }
  }

  @Test
  void saxpyProfilesExactOnTheGpuWithTheSameResponses() throws Exception {
    List<FunctionRequest> samples = List.of(FunctionRequest.of(JSON.readTree("{\"a\": 2}")),
        FunctionRequest.of(JSON.readTree("{\"a\": -0.5}")));
    try (CudaDriver driver = CudaDriver.open()) {
      Run r = run(driver, new SaxpyFunction(), "{\"n\": 5000, \"seed\": 7}", samples);
      assertEquals(r.plain(), r.profiled(), "profiling must not change a response");
      assertEquals(2, r.launches().size(), "the GPU profiler ran");
      assertEquals(2, r.profile().launches());
      AccessProfile.KernelProfile k = r.profile().kernels().get("contract/thaw_test_saxpy");
      assertEquals(AccessProfile.Verdict.EXACT, k.verdict(), k.reasons().toString());
      assertEquals(AccessProfile.OrderSource.SPECULATED, r.profile().orderSource());
      assertEquals(List.of("x", "out"), r.profile().firstTouch());
      assertTrue(r.launches().stream().allMatch(GpuLaunchCheck::exact), r.launches().toString());
    }
  }

  @Test
  void profilingOnCudaIsTheGpuProfiler() throws Exception {
    try (CudaDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx); AccessProfiler p = Profiling.attach(session)) {
      assertInstanceOf(GpuProfiler.class, p);
    }
  }

  @Test
  void aPointerTableReadIsUnsafeNamingTheBufferAsOnTheSim() throws Exception {
    PointerTableFunction f = new PointerTableFunction();
    List<FunctionRequest> samples = List.of(FunctionRequest.of(JSON.createObjectNode()));
    String config = "{\"n\": 1000}";
    Run gpu;
    try (CudaDriver driver = CudaDriver.open()) {
      gpu = run(driver, f, config, samples);
    }
    Run sim;
    try (SimDriver driver = SimDriver.open(new SimOptions())) {
      sim = run(driver, f, config, samples);
    }
    assertEquals(gpu.plain(), gpu.profiled(), "profiling must not change a response");
    assertEquals(sim.plain(), gpu.plain(), "the kernels compute the same floats on both devices");
    assertEquals(AccessProfile.OrderSource.RECORDED, sim.profile().orderSource());
    assertEquals(AccessProfile.OrderSource.SPECULATED, gpu.profile().orderSource());

    assertEquals(verdicts(sim.profile()), verdicts(gpu.profile()), "the GPU and the sim must agree on every kernel");
    assertEquals(Map.of(PointerTableFunction.TABLE, AccessProfile.Verdict.UNSAFE, PointerTableFunction.ARGS_ONLY,
        AccessProfile.Verdict.EXACT), verdicts(gpu.profile()));
    for (String kernel : List.of(PointerTableFunction.TABLE, PointerTableFunction.ARGS_ONLY)) {
      assertEquals(sim.profile().kernels().get(kernel).analysisNotes(),
          gpu.profile().kernels().get(kernel).analysisNotes(), kernel);
    }
    String onSim = sim.profile().kernels().get(PointerTableFunction.TABLE).reasons().get(0);
    String onGpu = gpu.profile().kernels().get(PointerTableFunction.TABLE).reasons().get(0);
    assertTrue(onSim.contains("'t0' is not in the speculated set"), onSim);
    assertTrue(onGpu.contains("'t0' is not in the speculated set") && onGpu.contains("1000 accesses")
        && onGpu.contains("spec_pointer_table, line "), onGpu);

    // Every thread read one float of t0 outside its set; nothing else was out of it.
    GpuLaunchCheck table = gpu.launches().get(0);
    assertEquals(1000, table.violationCount(), table.violations().toString());
    assertEquals(1, table.violations().size(), table.violations().toString());
    Violation v = table.violations().get(0).violation();
    assertEquals("t0", v.allocation());
    assertEquals(AccessKind.READ, v.access());
    assertEquals(4000, v.bytes());
    assertTrue(gpu.launches().get(1).exact(), gpu.launches().get(1).toString());
    // The GPU orders the speculated sets only: t0, which only the unsafe kernel reached, is not ordered.
    assertEquals(List.of("tables", "out", "doubled"), gpu.profile().firstTouch());
    assertEquals(List.of("tables", "out", "t0", "doubled"), sim.profile().firstTouch());
  }

  private static Map<String, AccessProfile.Verdict> verdicts(AccessProfile p) {
    Map<String, AccessProfile.Verdict> m = new TreeMap<>();
    p.kernels().forEach((k, v) -> m.put(k, v.verdict()));
    return m;
  }
}
