package dev.thaw.runtime.speculation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.check.CheckKernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.Dim3;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Pins the profile an image build stores: verdicts per kernel, first-touch order, and its JSON form. */
class ProfilerTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void aFunctionProfilesExactAndItsProfileRoundTripsThroughJson() throws Exception {
    try (SpecSession s = new SpecSession()) {
      SaxpyFunction f = new SaxpyFunction();
      SaxpyFunction.State state = f.init(s.session, JSON.readTree("{\"n\": 300}"));
      AccessProfile profile = Profiler.profile("saxpy:1", f, s.session, state,
          List.of(FunctionRequest.of(JSON.readTree("{\"a\": 2}")), FunctionRequest.of(JSON.readTree("{\"a\": 3}"))));
      assertEquals(2, profile.launches());
      assertEquals(AccessProfile.Verdict.EXACT, profile.verdict("contract/thaw_test_saxpy"));
      // y is only read by the host-side device-to-device copy, which no launch record sees.
      assertEquals(List.of("x", "out"), profile.firstTouch());
      assertEquals(AccessProfile.OrderSource.RECORDED, profile.orderSource());

      JsonNode json = JSON.valueToTree(profile);
      assertEquals("exact", json.at("/kernels/contract~1thaw_test_saxpy/verdict").asText(), json.toString());
      assertEquals("recorded", json.get("orderSource").asText());
      assertEquals(profile, JSON.treeToValue(json, AccessProfile.class));
      assertTrue(s.session.launchInterceptor() == null, "profiling detaches");
    }
  }

  @Test
  void aKernelThatLeavesItsSetIsUnsafeWithTheReasonAndMissedBuffersStillGetAnOrder() throws Exception {
    try (SpecSession s = new SpecSession(); Profiler p = Profiler.attach(s.session)) {
      BufferRef tables = s.session.allocate("tables", 8);
      BufferRef t0 = s.floats("t0", 8, 10);
      BufferRef out = s.floats("out", 8, 0);
      s.putLongs(tables, s.address(t0));
      s.session.launch(s.kernel("spec_pointer_table"), Dim3.of(1), Dim3.of(32), tables, 1, out, 8);
      s.session.launch(s.kernel("spec_args_only"), Dim3.of(1), Dim3.of(32), out, t0, 8);
      AccessProfile profile = p.finish("table:1");
      AccessProfile.KernelProfile k = profile.kernels().get("spec/spec_pointer_table");
      assertEquals(AccessProfile.Verdict.UNSAFE, k.verdict());
      assertTrue(k.reasons().get(0).contains("'t0' is not in the speculated set"), k.reasons().toString());
      assertTrue(k.analysisNotes().get(0).contains("loaded from memory"), k.analysisNotes().toString());
      assertEquals(AccessProfile.Verdict.EXACT, profile.verdict("spec/spec_args_only"));
      assertEquals(List.of("tables", "out", "t0"), profile.firstTouch());
      assertEquals("unsafe", JSON.valueToTree(profile).at("/kernels/spec~1spec_pointer_table/verdict").asText());
    }
  }

  @Test
  void everyKernelOfTheContractAndCheckModulesIsExact() throws Exception {
    try (SpecSession s = new SpecSession(); Profiler p = Profiler.attach(s.session)) {
      s.session.loadModule("contract", SpeculationKernels.contractPtx());
      s.session.loadModule("check", CheckKernels.ptx());
      BufferRef x = s.floats("x", 256, 1);
      BufferRef y = s.floats("y", 256, 2);
      BufferRef out = s.floats("out", 256, 0);
      Dim3 grid = Dim3.of(2);
      Dim3 block = Dim3.of(128);
      KernelRef empty = s.session.kernelRef("contract", "thaw_test_empty");
      s.session.launch(empty, grid, block);
      s.session.launch(s.session.kernelRef("contract", "thaw_test_saxpy"), grid, block, 2f, x, y, 256);
      ByteBuffer st = ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN);
      st.putLong(0, s.address(out)).putInt(8, 256).putFloat(12, 0.5f).putDouble(16, 1.0);
      s.session.launch(s.session.kernelRef("contract", "thaw_test_struct"), grid, block, (Object) st.array());
      s.session.launch(s.session.kernelRef("contract", "thaw_test_scalars"), grid, block, (byte) 1, (short) 2, 3, 4L,
          5f, 6.0, out);
      s.session.launch(s.session.kernelRef("contract", "thaw_test_store"), grid, block, s.address(out) + 16, 7);
      s.session.launch(s.session.kernelRef("check", CheckKernels.EMPTY), grid, block);
      s.session.launch(s.session.kernelRef("check", CheckKernels.SAXPY), grid, block, 2f, x, y, 256);
      s.session.launch(s.session.kernelRef("check", CheckKernels.FILL_U32), grid, block, out, 9, 256);
      AccessProfile profile = p.finish("bundled");
      assertEquals(8, profile.launches());
      assertEquals(8, profile.kernels().size());
      profile.kernels().forEach((name, k) -> {
        assertEquals(AccessProfile.Verdict.EXACT, k.verdict(), name + ": " + k.reasons());
        assertTrue(k.analysisNotes().isEmpty(), name + ": " + k.analysisNotes());
      });
      assertEquals(List.of("x", "y", "out"), profile.firstTouch());
    }
  }
}
