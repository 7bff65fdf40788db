package dev.thaw.runtime.speculation;

import static dev.thaw.runtime.speculation.AccessKind.READ;
import static dev.thaw.runtime.speculation.AccessKind.READ_WRITE;
import static dev.thaw.runtime.speculation.AccessKind.WRITE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.check.CheckKernels;
import dev.thaw.runtime.ptx.PtxEntries;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Pins what the PTX analysis derives for nvcc-made kernels, and where it gives up conservatively. */
class PtxAccessAnalysisTest {

  static final PtxAccessAnalysis SPEC = PtxAccessAnalysis.of(SpeculationKernels.ptx());

  private static List<AccessKind> params(PtxAccessAnalysis a, String entry) {
    PtxAccessAnalysis.EntryAccess e = a.entry(entry);
    AccessKind[] out = new AccessKind[e.layout().count()];
    for (int i = 0; i < out.length; i++) {
      out[i] = e.paramKind(i);
    }
    return Arrays.asList(out);
  }

  @Test
  void argumentsAreReadOrWrittenAsTheKernelUsesThem() {
    assertEquals(Arrays.asList(READ, WRITE, null), params(SPEC, "spec_args_only"));
    assertEquals(Arrays.asList(WRITE, null, null), params(SPEC, "spec_write_past"));
    assertTrue(SPEC.entry("spec_args_only").notes().isEmpty());
  }

  @Test
  void aPointerLoadedFromATableIsReportedAndTheTableIsRead() {
    // k indexes the table (i % k): index arithmetic flows into addresses too; a small int names no allocation.
    assertEquals(Arrays.asList(READ, READ, WRITE, null), params(SPEC, "spec_pointer_table"));
    List<String> notes = SPEC.entry("spec_pointer_table").notes();
    assertEquals(1, notes.size(), notes.toString());
    assertTrue(notes.get(0).contains("loaded from memory"), notes.get(0));
  }

  @Test
  void predicatedAndGenericStoresAreWrites() {
    assertEquals(Arrays.asList(READ, WRITE, null, null), params(SPEC, "spec_predicated"));
    assertEquals(Arrays.asList(WRITE, null, null), params(SPEC, "spec_generic_ptr"));
    assertTrue(SPEC.entry("spec_generic_ptr").notes().isEmpty(), SPEC.entry("spec_generic_ptr").notes().toString());
  }

  @Test
  void callsToDeviceFunctionsAreFollowedThroughArgumentsAndReturnValues() {
    assertEquals(Arrays.asList(WRITE, READ, null), params(SPEC, "spec_generic"));
    // spec_pick returns out or other: both may be written; `which` only selects.
    assertEquals(Arrays.asList(READ, WRITE, WRITE, null, null), params(SPEC, "spec_calls"));
    assertTrue(SPEC.entry("spec_calls").notes().isEmpty(), SPEC.entry("spec_calls").notes().toString());
  }

  @Test
  void structParametersAreClassifiedPerSlot() {
    PtxAccessAnalysis.EntryAccess e = SPEC.entry("spec_struct");
    assertEquals(4, e.slotCount());
    assertEquals(Arrays.asList(READ, null, WRITE, READ_WRITE),
        Arrays.asList(e.slotKind(0), e.slotKind(1), e.slotKind(2), e.slotKind(3)));
  }

  @Test
  void whatCannotBeFollowedIsReadWriteAndReported() {
    assertEquals(Arrays.asList(READ_WRITE, WRITE), params(SPEC, "spec_escape"));
    assertTrue(SPEC.entry("spec_escape").notes().get(0).contains("stored to memory"));
    assertEquals(Arrays.asList(READ_WRITE, null, null, null), params(SPEC, "spec_indirect"));
    assertTrue(SPEC.entry("spec_indirect").notes().get(0).startsWith("indirect call"),
        SPEC.entry("spec_indirect").notes().toString());
  }

  @Test
  void externalCallsRecursionAndTakenParameterAddressesAreConservative() {
    String ptx = """
        .version 8.0
        .target sm_80
        .address_size 64
        .extern .func (.param .b64 func_retval0) malloc (.param .b64 malloc_param_0);
        .func rec(.param .b64 rec_param_0)
        {
          .reg .b64 %rd<3>;
          ld.param.u64 %rd1, [rec_param_0];
          { .param .b64 param0;
          st.param.b64 [param0+0], %rd1;
          call.uni rec, (param0); }
          ret;
        }
        .visible .entry k(.param .u64 k_p0, .param .u64 k_p1, .param .align 8 .b8 k_s[16])
        {
          .reg .b64 %rd<9>;
          ld.param.u64 %rd1, [k_p0];
          { .param .b64 param0;
          st.param.b64 [param0+0], %rd1;
          .param .b64 retval0;
          call.uni (retval0), malloc, (param0);
          ld.param.b64 %rd2, [retval0+0]; }
          ld.param.u64 %rd3, [k_p1];
          { .param .b64 param0;
          st.param.b64 [param0+0], %rd3;
          call.uni rec, (param0); }
          mov.b64 %rd4, k_s;
          ret;
        }
        """;
    PtxAccessAnalysis a = PtxAccessAnalysis.of(ptx);
    PtxAccessAnalysis.EntryAccess k = a.entry("k");
    assertEquals(Arrays.asList(READ_WRITE, READ_WRITE, READ_WRITE), params(a, "k"), k.toString());
    String notes = k.notes().toString();
    assertTrue(notes.contains("malloc") && notes.contains("recursive") && notes.contains("address of parameter"),
        notes);
  }

  @Test
  void layoutsAgreeWithPtxEntriesAndTheBundledModulesAreFollowedExactly() {
    for (String ptx : List.of(SpeculationKernels.ptx(), SpeculationKernels.contractPtx(), CheckKernels.ptx())) {
      PtxAccessAnalysis a = PtxAccessAnalysis.of(ptx);
      assertEquals(PtxEntries.parse(ptx).entries().keySet(), a.entries());
      PtxEntries.parse(ptx).entries().forEach((name, layout) -> assertEquals(layout, a.entry(name).layout()));
    }
    PtxAccessAnalysis contract = PtxAccessAnalysis.of(SpeculationKernels.contractPtx());
    assertEquals(Arrays.asList(null, READ, READ_WRITE, null), params(contract, "thaw_test_saxpy"));
    assertEquals(WRITE, contract.entry("thaw_test_struct").slotKind(0));
    assertEquals(null, contract.entry("thaw_test_struct").slotKind(1));
    assertEquals(WRITE, params(contract, "thaw_test_scalars").get(6));
    assertEquals(Arrays.asList(WRITE, null), params(contract, "thaw_test_store"));
    PtxAccessAnalysis check = PtxAccessAnalysis.of(CheckKernels.ptx());
    assertEquals(Arrays.asList(null, READ, READ_WRITE, null), params(check, "thaw_saxpy"));
    assertEquals(Arrays.asList(WRITE, null, null), params(check, "thaw_fill_u32"));
    for (PtxAccessAnalysis m : List.of(contract, check)) {
      for (String e : m.entries()) {
        assertTrue(m.entry(e).notes().isEmpty(), e + ": " + m.entry(e).notes());
      }
    }
  }
}
