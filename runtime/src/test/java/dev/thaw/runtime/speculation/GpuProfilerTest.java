package dev.thaw.runtime.speculation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.LaunchInterceptor;
import dev.thaw.runtime.function.LaunchRedirect;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import dev.thaw.runtime.ptx.instrument.AccessOp;
import dev.thaw.runtime.ptx.instrument.AccessSite;
import dev.thaw.runtime.ptx.instrument.GuardViolation;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import dev.thaw.runtime.ptx.instrument.ViolationReport;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;

/**
 * Everything of GPU profiling that does not need a GPU, on the sim device: the redirect to the instrumented kernel
 * (the sim runs its Java twin, which ignores the guard), outputs, the speculated order, modules that cannot be
 * instrumented, chaining, and how a guard's records become violations. GpuProfilerGpuTest covers the guard itself.
 */
class GpuProfilerTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  private static List<FunctionRequest> samples() throws Exception {
    return List.of(FunctionRequest.of(JSON.readTree("{\"a\": 2}")), FunctionRequest.of(JSON.readTree("{\"a\": 3}")));
  }

  @Test
  void onTheSimDeviceAttachRefersToTheExactProfiler() {
    try (SpecSession s = new SpecSession()) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> GpuProfiler.attach(s.session));
      assertTrue(e.getMessage().contains("Profiler"), e.getMessage());
      assertNull(s.session.launchInterceptor());
    }
  }

  @Test
  void everyLaunchRunsTheInstrumentedKernelWithTheSameOutputsAndTheProfileIsExactInSpeculatedOrder()
      throws Exception {
    try (SpecSession s = new SpecSession()) {
      SaxpyFunction f = new SaxpyFunction();
      SaxpyFunction.State state = f.init(s.session, JSON.readTree("{\"n\": 300}"));
      List<JsonNode> plain = new ArrayList<>();
      for (FunctionRequest r : samples()) {
        plain.add(f.invoke(s.session, state, r).json());
      }
      int plainBytes = s.session.kernel(state.saxpy()).params().totalSize();
      List<SimLaunchRecord> seen = new ArrayList<>();
      Consumer<SimLaunchRecord> listener = seen::add;
      ((SimContext) s.context).addLaunchListener(listener);
      List<JsonNode> profiled = new ArrayList<>();
      AccessProfile profile;
      try (GpuProfiler p = GpuProfiler.attachOnAnyDevice(s.session)) {
        assertNull(p.instrumentationFailure("contract"));
        for (FunctionRequest r : samples()) {
          profiled.add(f.invoke(s.session, state, r).json());
        }
        profile = p.finish("saxpy:1");
        GpuLaunchCheck first = p.launches().get(0);
        assertEquals("{x: READ, out: READ_WRITE}", first.speculated().toString());
        assertTrue(first.exact());
      } finally {
        ((SimContext) s.context).removeLaunchListener(listener);
      }
      assertEquals(plain, profiled, "profiling must not change a response");
      assertEquals(2, seen.size());
      int guardAt = (plainBytes + 7) & ~7;
      for (SimLaunchRecord r : seen) {
        // The instrumented twin takes the guard table's address after the plain parameters, 8-byte aligned.
        assertEquals(guardAt + 8, r.args().length, r.toString());
        long guard = ByteBuffer.wrap(r.args()).order(ByteOrder.LITTLE_ENDIAN).getLong(guardAt);
        assertNotEquals(0L, guard);
        assertEquals(-1, AllocationIndex.of(s.session.table().allocations()).find(guard),
            "the guard table is not one of the function's allocations");
      }
      assertEquals(2, profile.launches());
      assertEquals(AccessProfile.Verdict.EXACT, profile.verdict("contract/thaw_test_saxpy"));
      assertEquals(AccessProfile.OrderSource.SPECULATED, profile.orderSource());
      assertEquals(List.of("x", "out"), profile.firstTouch());
      JsonNode json = JSON.valueToTree(profile);
      assertEquals("speculated", json.get("orderSource").asText());
      assertEquals(profile, JSON.treeToValue(json, AccessProfile.class));
      assertNull(s.session.launchInterceptor(), "closing detaches");
      assertEquals(plain.get(0), f.invoke(s.session, state, samples().get(0)).json());
    }
  }

  @Test
  void aModuleThatCannotBeInstrumentedRunsPlainAndItsKernelsAreUnsafeWithTheReason() {
    try (SpecSession s = new SpecSession(); GpuProfiler p = GpuProfiler.attachOnAnyDevice(s.session)) {
      // The whole speculation module has spec_indirect, a call through a register: refused.
      String why = p.instrumentationFailure(SpeculationKernels.MODULE);
      assertTrue(why != null && why.contains("spec_indirect"), String.valueOf(why));
      BufferRef x = s.floats("x", 64, 1);
      BufferRef y = s.floats("y", 64, 0);
      List<SimLaunchRecord> seen = new ArrayList<>();
      Consumer<SimLaunchRecord> listener = seen::add;
      ((SimContext) s.context).addLaunchListener(listener);
      KernelRef argsOnly = s.kernel("spec_args_only");
      s.session.launch(argsOnly, Dim3.of(1), Dim3.of(64), x, y, 64);
      s.session.synchronize();
      ((SimContext) s.context).removeLaunchListener(listener);
      assertEquals(s.session.kernel(argsOnly).params().totalSize(), seen.get(0).args().length, "the plain kernel ran");
      ByteBuffer out = ByteBuffer.allocateDirect(4 * 64).order(ByteOrder.LITTLE_ENDIAN);
      s.session.download(y, 0, out);
      assertEquals(2f * (1 + 63), out.getFloat(4 * 63));
      AccessProfile profile = p.finish("spec");
      AccessProfile.KernelProfile k = profile.kernels().get("spec/spec_args_only");
      assertEquals(AccessProfile.Verdict.UNSAFE, k.verdict());
      assertEquals(1, k.reasons().size(), k.reasons().toString());
      assertTrue(k.reasons().get(0).startsWith("not validated: module 'spec' cannot be instrumented: cannot instrument "
          + "spec_indirect"), k.reasons().toString());
      assertEquals(List.of("x", "y"), profile.firstTouch(), "speculation still orders its buffers");
    }
  }

  @Test
  void thePointerTableTestModuleCanBeInstrumented() {
    assertEquals(List.of("spec_args_only", "spec_pointer_table"),
        PtxInstrumenter.instrument(PointerTableFunction.PTX).kernels());
  }

  @Test
  void onTheSimTheGpuProfilerRunsThePointerTableFunctionInstrumentedWithTheSameResponse() throws Exception {
    PointerTableFunction f = new PointerTableFunction();
    try (SpecSession s = new SpecSession(false)) {
      PointerTableFunction.State state = f.init(s.session, JSON.readTree("{\"n\": 1000}"));
      JsonNode plain = f.invoke(s.session, state, FunctionRequest.of(JSON.createObjectNode())).json();
      try (GpuProfiler p = GpuProfiler.attachOnAnyDevice(s.session)) {
        assertEquals(plain, f.invoke(s.session, state, FunctionRequest.of(JSON.createObjectNode())).json());
        assertNull(p.instrumentationFailure(SpeculationKernels.MODULE));
        AccessProfile profile = p.finish("table");
        assertEquals(List.of("tables", "out", "doubled"), profile.firstTouch());
        assertEquals(2, profile.launches());
        assertTrue(p.launches().stream().allMatch(c -> c.unchecked() == null), p.launches().toString());
      }
    }
  }

  @Test
  void anInterceptorInstalledBeforeStillSeesEveryLaunchAndIsPutBack() throws Exception {
    try (SpecSession s = new SpecSession()) {
      SaxpyFunction f = new SaxpyFunction();
      SaxpyFunction.State state = f.init(s.session, JSON.readTree("{\"n\": 300}"));
      List<KernelRef> seen = new ArrayList<>();
      LaunchInterceptor before = (kernel, grid, block, shmem, stream, args) -> seen.add(kernel);
      s.session.setLaunchInterceptor(before);
      try (GpuProfiler p = GpuProfiler.attachOnAnyDevice(s.session)) {
        f.invoke(s.session, state, samples().get(0));
        assertEquals(1, p.launches().size());
      }
      assertEquals(List.of(state.saxpy()), seen);
      assertSame(before, s.session.launchInterceptor());
    }
  }

  @Test
  void neitherProfilerChainsInFrontOfARedirect() {
    try (SpecSession s = new SpecSession()) {
      LaunchRedirect other = new LaunchRedirect() {
        @Override
        public void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int shmem,
            GpuStream stream, KernelArgs args) {}

        @Override
        public boolean launchInstead(KernelRef kernel, Dim3 grid, Dim3 block, int shmem,
            GpuStream stream, KernelArgs args) {
          return false;
        }
      };
      s.session.setLaunchInterceptor(other);
      assertThrows(IllegalStateException.class, () -> GpuProfiler.attachOnAnyDevice(s.session));
      assertThrows(IllegalStateException.class, () -> SimValidator.attach(s.session));
      assertSame(other, s.session.launchInterceptor());
    }
  }

  @Test
  void guardRecordsBecomeViolationsNamingAllocationKindAndSiteMergedPerInstruction() {
    try (SpecSession s = new SpecSession()) {
      BufferRef tables = s.session.allocate("tables", 8);
      BufferRef t0 = s.floats("t0", 8, 10);
      BufferRef out = s.floats("out", 8, 0);
      KernelRef table = s.kernel("spec_pointer_table");
      KernelArgs args = s.session.kernel(table).newArgs().setAll(s.address(tables), 1, s.address(out), 8);
      AccessSet set = new AccessSpeculator(s.session).speculate(table, args);
      assertEquals("{tables: READ, out: WRITE}", set.toString());

      long t = s.address(t0);
      long tb = s.address(tables);
      long o = s.address(out);
      List<GuardViolation> recorded = List.of(
          read(7, t + 4, 4), read(7, t, 4), read(7, t + 28, 4),
          new GuardViolation(9, tb, 8, AccessOp.WRITE),
          new GuardViolation(11, o + 4, 4, AccessOp.ATOMIC),
          read(7, t + 32, 4),
          read(5, tb + 4, 8));
      Map<Integer, AccessSite> sites = Map.of(7, new AccessSite(7, "spec_pointer_table", 45,
          AccessOp.READ, false, "ld.global.f32 %f1, [%rd10];"));
      List<SiteViolation> got = GpuProfiler.violations(table, 3, set, new ViolationReport(9, recorded), sites);

      assertEquals(5, got.size(), got.toString());
      SiteViolation tableWrite = got.get(0);
      assertEquals(Violation.Reason.WRONG_KIND, tableWrite.violation().reason());
      assertEquals(AccessKind.WRITE, tableWrite.violation().access());
      assertTrue(tableWrite.toString().contains("'tables' is speculated read-only"), tableWrite.toString());
      // A read that starts in an allowed buffer and runs past its end offends from the end on.
      SiteViolation pastTables = got.get(1);
      assertEquals(Violation.Reason.UNMAPPED, pastTables.violation().reason());
      assertEquals(tb + 8, pastTables.violation().address());
      assertEquals(4, pastTables.violation().bytes());
      assertEquals("unmapped", pastTables.violation().target());
      assertEquals(5, pastTables.site().id(), "an unknown site is still named by its id");

      SiteViolation missed = got.get(2);
      assertEquals(Violation.Reason.NOT_SPECULATED, missed.violation().reason());
      assertEquals("t0", missed.violation().allocation());
      assertEquals(t, missed.violation().address());
      assertEquals(32, missed.violation().bytes());
      assertEquals(3, missed.accesses());
      assertEquals(3, missed.violation().launch());
      String text = missed.toString();
      assertTrue(text.contains("'t0' is not in the speculated set") && text.contains("3 accesses")
          && text.contains("line 45"), text);
      SiteViolation padding = got.get(3);
      assertEquals(Violation.Reason.UNMAPPED, padding.violation().reason());
      assertEquals(t + 32, padding.violation().address());
      // An atomic on a buffer speculated write-only lacks the read right.
      SiteViolation atomic = got.get(4);
      assertEquals(Violation.Reason.WRONG_KIND, atomic.violation().reason());
      assertEquals(AccessKind.READ, atomic.violation().access());
      assertTrue(atomic.toString().contains("'out' is speculated write-only"), atomic.toString());
    }
  }

  @Test
  void theGuardTableAllowsExactlyTheSpeculatedAllocationsWithTheirKinds() {
    try (SpecSession s = new SpecSession()) {
      BufferRef tables = s.session.allocate("tables", 8);
      BufferRef out = s.floats("out", 8, 0);
      KernelRef table = s.kernel("spec_pointer_table");
      KernelArgs args = s.session.kernel(table).newArgs().setAll(s.address(tables), 1, s.address(out), 8);
      AccessSet set = new AccessSpeculator(s.session).speculate(table, args);
      assertEquals(String.format("GuardTable[[0x%x, 0x%x) r, [0x%x, 0x%x) w; 1024 records]", s.address(tables),
          s.address(tables) + 8, s.address(out), s.address(out) + 32), GpuProfiler.allowed(set).toString());
    }
  }

  private static GuardViolation read(int site, long address, int size) {
    return new GuardViolation(site, address, size,
        AccessOp.READ);
  }
}
