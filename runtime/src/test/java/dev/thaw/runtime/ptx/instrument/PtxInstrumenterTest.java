package dev.thaw.runtime.ptx.instrument;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.ParamType;
import dev.thaw.runtime.ptx.PtxEntries;
import dev.thaw.runtime.ptx.PtxModuleInfo;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/** What the instrumenter checks, how, and what it refuses; every accepted output must assemble. */
class PtxInstrumenterTest {

  static Stream<String> modules() {
    return TestPtx.modules().keySet().stream().sorted();
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("modules")
  void instrumentedNvccModulesAssembleForSm90AndSm80(String name) {
    Path ptxas = TestPtx.ptxas();
    Assumptions.assumeTrue(ptxas != null, "ptxas is not on the PATH");
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.modules().get(name));
    for (String arch : List.of("sm_90", "sm_80")) {
      TestPtx.assemble(ptxas, m.ptx(), arch);
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("modules")
  void everyKernelTakesItsParametersPlusTheGuard(String name) {
    String ptx = TestPtx.modules().get(name);
    PtxModuleInfo before = PtxEntries.parse(ptx);
    PtxModuleInfo after = PtxEntries.parse(PtxInstrumenter.instrument(ptx).ptx());
    assertEquals(before.entries().keySet(), after.entries().keySet());
    for (Map.Entry<String, ParamLayout> e : before.entries().entrySet()) {
      ParamLayout instrumented = after.entries().get(e.getKey());
      ValidatingLauncher.checkLayouts(e.getValue(), instrumented, e.getKey());
      KernelParam guard = instrumented.get(instrumented.count() - 1);
      assertEquals(PtxInstrumenter.GUARD_PARAM, guard.name());
      assertEquals(0, guard.offset() % 8, e.getKey() + ": guard at " + guard.offset());
    }
  }

  @Test
  void saxpyChecksItsTwoLoadsAndItsStoreWithTheirInstructionIndices() {
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.resource(TestPtx.CONTRACT));
    List<AccessSite> sites = m.sitesOf("thaw_test_saxpy");
    assertEquals(List.of(AccessOp.READ, AccessOp.READ, AccessOp.WRITE),
        sites.stream().map(AccessSite::kind).toList());
    assertEquals(List.of(56, 58, 60), sites.stream().map(AccessSite::line).toList());
    assertEquals("ld.global.f32 \t%f2, [%rd6];", sites.get(0).instruction());
    assertFalse(sites.get(0).generic());
    // thaw_test_empty has 1 instruction (ret, index 0); saxpy's first ld.global.f32 is its 17th: index 17.
    assertEquals(17, sites.get(0).id());
    assertEquals(sites.get(0), m.site(17));
  }

  @Test
  void sizesFollowVectorCountAndTypeWidth() {
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.kernel("""
        ld.global.nc.v4.u32 {%r1, %r2, %r3, %r4}, [%rd2+16];
        st.global.v2.f64 [%rd2], {%rd3, %rd4};
        ld.global.u16 %rs1, [%rd2];
        atom.global.add.u64 %rd3, [%rd2], 1;
        red.global.add.f32 [%rd2+4], %f1;
        """));
    String ptx = m.ptx();
    assertEquals(List.of(AccessOp.READ, AccessOp.WRITE, AccessOp.READ, AccessOp.ATOMIC, AccessOp.ATOMIC),
        m.sites().stream().map(AccessSite::kind).toList());
    assertEquals(List.of(16L, 16L, 2L, 8L, 4L), sizes(ptx));
    assertTrue(ptx.contains("add.s64 \t%thaw_rd1, %rd2, 16;"), ptx);
    assertTrue(ptx.contains("and.b64 \t%thaw_rd7, %thaw_rd7, 3;"), "an atomic needs read and write:\n" + ptx);
    assemblesWhereptxasIs(ptx);
  }

  @Test
  void sharedLocalParamConstAndModuleVariableAccessesAreNotChecked() {
    String ptx = """
        .version 8.0
        .target sm_90
        .address_size 64
        .global .align 4 .u32 counter;
        .const .align 4 .u32 limit;
        .visible .entry k(.param .u64 k_p0)
        {
          .reg .b32 %r<4>;
          .reg .b64 %rd<4>;
          .shared .align 4 .b8 s[64];
          .local .align 4 .b8 l[16];
          ld.param.u64 %rd1, [k_p0];
          mov.u32 %r1, s;
          ld.shared.u32 %r2, [%r1+4];
          st.shared::cta.u32 [%r1], %r2;
          mov.u64 %rd2, l;
          st.local.u32 [%rd2], %r2;
          ld.const.u32 %r3, [limit];
          ld.global.u32 %r3, [counter+0];
          atom.shared.add.u32 %r3, [%r1], 1;
          ret;
        }
        """;
    InstrumentedModule m = PtxInstrumenter.instrument(ptx);
    assertEquals(List.of(), m.sites());
    assemblesWhereptxasIs(m.ptx());
  }

  @Test
  void genericAccessesAreCheckedOnlyWhenTheyPointToGlobalMemory() {
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.kernel("\tst.u32 [%rd1], %r1;\n\tld.u32 %r2, [%rd1+8];"));
    assertTrue(m.sites().stream().allMatch(AccessSite::generic));
    String ptx = m.ptx();
    int isspacep = ptx.indexOf("isspacep.global \t%thaw_p0, %thaw_rd1;");
    assertTrue(isspacep > 0, ptx);
    assertTrue(ptx.substring(isspacep).startsWith("isspacep.global \t%thaw_p0, %thaw_rd1;\n\t@!%thaw_p0 bra \t$thaw_"),
        ptx);
    assertFalse(ptx.contains("cvta.global.u64"), "a generic address is compared as it is:\n" + ptx);
    assemblesWhereptxasIs(ptx);
  }

  @Test
  void aPredicatedAccessIsCheckedOnlyWhereItsPredicateHolds() {
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.kernel(
        "\tsetp.ne.s32 %p1, %r1, 0;\n\t@%p1 st.global.u32 [%rd2], %r1;\n\t@!%p1 st.global.u32 [%rd2+4], %r1;"));
    String ptx = m.ptx();
    int first = m.sites().get(0).id();
    int second = m.sites().get(1).id();
    assertTrue(ptx.contains("@!%p1 bra \t$thaw_" + first + "_done;"), ptx);
    assertTrue(ptx.contains("@%p1 bra \t$thaw_" + second + "_done;"), ptx);
    assertTrue(ptx.indexOf("$thaw_" + first + "_done:\n\t@%p1 st.global.u32") > 0, "the access follows its check:\n" + ptx);
    assemblesWhereptxasIs(ptx);
  }

  @Test
  void deviceFunctionsTakeTheGuardAndEveryCallPassesIt() {
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.resource(TestPtx.INSTRUMENT));
    String ptx = m.ptx();
    assertTrue(ptx.contains(".func thaw_instr_store_at(\n\t.param .b64 thaw_instr_store_at_param_0,\n"
        + "\t.param .b32 thaw_instr_store_at_param_1,\n\t.param .b32 thaw_instr_store_at_param_2,\n"
        + "\t.param .b64 __thaw_guard\n)"), ptx);
    assertTrue(ptx.contains("(.param .b32 func_retval0) thaw_instr_load_at(\n\t.param .b64 thaw_instr_load_at_param_0,"
        + "\n\t.param .b32 thaw_instr_load_at_param_1,\n\t.param .b64 __thaw_guard\n)"), ptx);
    Matcher calls = Pattern.compile("call\\.uni \t(\\(retval0\\), )?thaw_instr_(store|load)_at, \\(([^)]*)\\);").matcher(ptx);
    int n = 0;
    while (calls.find()) {
      assertTrue(calls.group(3).endsWith("__thaw_gp" + n), calls.group());
      assertTrue(ptx.contains("st.param.b64 \t[__thaw_gp" + n + "], %thaw_rd0;"), ptx);
      n++;
    }
    assertEquals(3, n, "calls in thaw_instr_calls");
    assertEquals(2, m.sitesOf("thaw_instr_store_at").size() + m.sitesOf("thaw_instr_load_at").size());
  }

  @Test
  void cpAsyncChecksItsGlobalSource() {
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.resource(TestPtx.INSTRUMENT));
    List<AccessSite> sites = m.sitesOf("thaw_instr_cp_async");
    assertEquals(2, sites.size());
    assertTrue(sites.get(0).instruction().startsWith("cp.async.cg.shared.global"), sites.get(0).toString());
    assertEquals(AccessOp.READ, sites.get(0).kind());
    assertEquals(AccessOp.WRITE, sites.get(1).kind());
  }

  @Test
  void systemCallsAreLeftAlone() {
    String ptx = """
        .version 8.0
        .target sm_90
        .address_size 64
        .extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
        .global .align 1 .b8 fmt[4] = {104, 105, 10, 0};
        .visible .entry k()
        {
          .reg .b32 %r<2>;
          .reg .b64 %rd<3>;
          mov.u64 %rd1, fmt;
          cvta.global.u64 %rd2, %rd1;
          {
          .param .b64 param0;
          st.param.b64 [param0], %rd2;
          .param .b64 param1;
          st.param.b64 [param1], 0;
          .param .b32 retval0;
          call.uni (retval0), vprintf, (param0, param1);
          ld.param.b32 %r1, [retval0];
          }
          ret;
        }
        """;
    String out = PtxInstrumenter.instrument(ptx).ptx();
    assertTrue(out.contains("call.uni \t(retval0), vprintf, (param0, param1);"), out);
    assertTrue(out.contains("vprintf(\n\t.param .b64 vprintf_param_0,\n\t.param .b64 vprintf_param_1\n)"), out);
    assemblesWhereptxasIs(out);
  }

  static Stream<Arguments> refused() {
    return Stream.of(
        Arguments.of("tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];", "texture and surface"),
        Arguments.of("suld.b.1d.b32.trap {%r1}, [%rd1, {%r2}];", "texture and surface"),
        Arguments.of("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], 64, [%r2];",
            "bulk and tensor copies"),
        Arguments.of("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];",
            "bulk and tensor copies"),
        Arguments.of("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd2], [%r1], 64;",
            "bulk and tensor copies"),
        Arguments.of("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3];", "st.async"),
        Arguments.of("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3];",
            "red.async"),
        Arguments.of("multimem.st.global.u32 [%rd2], %r1;", "multimem"),
        Arguments.of("tensormap.replace.tile.global_address.global.b1024.b64 [%rd2], %rd3;", "tensormap"),
        Arguments.of("discard.global.L2 [%rd2], 128;", "discard"),
        Arguments.of("wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r0}, [%rd2];",
            "without an explicit stride"),
        Arguments.of("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%rd2], {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f0};",
            "without an explicit stride"),
        Arguments.of("call.uni %rd2, (%r1);", "indirect calls"),
        Arguments.of("ld.global.u32 %r1, [%r2];", "not 64-bit"));
  }

  @ParameterizedTest(name = "{1}: {0}")
  @MethodSource("refused")
  void refusesWhatItCannotCheckNamingKernelLineAndStatement(String statement, String reason) {
    InstrumentationException e = assertThrows(InstrumentationException.class,
        () -> PtxInstrumenter.instrument(TestPtx.kernel("\t" + statement)));
    assertEquals("k", e.function());
    assertEquals(16, e.line());
    assertTrue(e.getMessage().startsWith("cannot instrument k, line 16: "), e.getMessage());
    assertTrue(e.getMessage().contains(reason), e.getMessage());
    assertTrue(e.construct().startsWith(statement.substring(0, statement.indexOf(' '))), e.construct());
  }

  @Test
  void refusesCallsThroughAPrototypeAndToBodiesOutsideTheModule() {
    String proto = """
        .version 8.0
        .target sm_90
        .address_size 64
        .extern .func g(.param .b64 g_p0);
        .visible .entry k()
        {
          .reg .b64 %rd<3>;
          mov.u64 %rd1, 0;
          {
          .param .b64 param0;
          st.param.b64 [param0], %rd1;
          %CALL%
          }
          ret;
        }
        """;
    InstrumentationException e = assertThrows(InstrumentationException.class, () -> PtxInstrumenter.instrument(
        proto.replace("%CALL%", "call.uni g, (param0);")));
    assertTrue(e.getMessage().contains("the body of g is not in this module"), e.getMessage());
    assertEquals(12, e.line());
    e = assertThrows(InstrumentationException.class, () -> PtxInstrumenter.instrument(
        proto.replace("%CALL%", "proto: .callprototype _ (.param .b64 _);\n call.uni %rd1, (param0), proto;")));
    assertTrue(e.getMessage().contains("indirect calls"), e.getMessage());
  }

  @Test
  void refusesModulesItCannotHandleAtAll() {
    InstrumentationException e = assertThrows(InstrumentationException.class,
        () -> PtxInstrumenter.instrument(TestPtx.kernel("").replace(".address_size 64", ".address_size 32")));
    assertTrue(e.getMessage().contains("only 64-bit addressing"), e.getMessage());
    String once = PtxInstrumenter.instrument(TestPtx.kernel("\tst.global.u32 [%rd2], %r1;")).ptx();
    e = assertThrows(InstrumentationException.class, () -> PtxInstrumenter.instrument(once));
    assertTrue(e.getMessage().contains("instrumented twice?"), e.getMessage());
  }

  @Test
  void checksAGlobalOrGenericWmmaFragmentAsItsWholeStridedSpan() {
    // a: 16 x 8 tf32 rows with a register stride (what nvcc emits for TF32 tiles, through generic pointers);
    // b col-major f16 with an immediate stride of 24: 16 rows of 16 halves, ((16 - 1) * 24 + 16) * 2 = 752.
    String body = "\tmov.u32 %r7, 12;\n"
        + "\twmma.load.a.sync.aligned.row.m16n16k8.tf32 {%r1, %r2, %r3, %r4}, [%rd2], %r7;\n"
        + "\twmma.load.b.sync.aligned.col.m16n16k16.global.f16 {%r1, %r2, %r3, %r4, %r5, %r6, %r0, %r7}, [%rd2+64], 24;\n"
        + "\twmma.store.d.sync.aligned.row.m16n16k16.shared.f32 [%rd2], {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f0}, 16;";
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.kernel(body));
    String ptx = m.ptx();
    List<AccessSite> sites = m.sitesOf("k");
    assertEquals(2, sites.size(), "the shared store is not checked: " + sites);
    assertEquals(AccessOp.READ, sites.get(0).kind());
    assertTrue(sites.get(0).generic());
    assertTrue(ptx.contains("mad.lo.s32 \t%thaw_r0, %r7, 60, 32;"), ptx); // (16 - 1) * 4, 8 * 4
    assertTrue(ptx.contains("cvt.u64.u32 \t%thaw_rd2, %thaw_r0;"), ptx);
    assertEquals(List.of(752L), sizes(ptx));
    assemblesWhereptxasIs(ptx);
  }

  /**
   * What tensor-core kernels issue (llama.cu's products and flash attention): cp.async sources are checked, a
   * register source size of 0 skips the check (the copy only zero-fills), and ldmatrix, mma and the cp.async
   * group instructions touch no global memory and are left as they are.
   */
  @Test
  void tensorCoreStagingChecksOnlyTheCpAsyncSources() {
    String body = "\tmov.u32 %r1, 0;\n\tmov.u32 %r2, 16;\n"
        + "\tcp.async.cg.shared.global [%r1], [%rd2], 16, %r2;\n"
        + "\tcp.async.cg.shared.global.L2::128B [%r1+16], [%rd2+16], 16;\n"
        + "\tcp.async.ca.shared.global [%r1+32], [%rd2+32], 8;\n"
        + "\tcp.async.commit_group;\n\tcp.async.wait_group 1;\n\tcp.async.wait_all;\n"
        + "\tldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r3, %r4, %r5, %r6}, [%r1];\n"
        + "\tldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r3, %r4, %r5, %r6}, [%r1+64];\n"
        + "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r3, %r4, %r5, %r6}, "
        + "{%r3, %r4}, {%f1, %f2, %f3, %f4};\n"
        + "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r3, %r4, %r5, %r6}, "
        + "{%r3, %r4}, {%f1, %f2, %f3, %f4};";
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.kernel("sm_80", body));
    List<AccessSite> sites = m.sitesOf("k");
    assertEquals(3, sites.size(), sites.toString());
    for (AccessSite s : sites) {
      assertEquals(AccessOp.READ, s.kind(), s.toString());
      assertTrue(s.instruction().startsWith("cp.async.c"), s.toString());
      assertFalse(s.generic(), s.toString());
    }
    String ptx = m.ptx();
    assertTrue(ptx.contains("setp.eq.u32 \t%thaw_p0, %r2, 0;"), ptx); // the register size: 0 skips the check
    assertTrue(ptx.contains("cvt.u64.u32 \t%thaw_rd2, %r2;"), ptx);
    assertEquals(List.of(16L, 8L), sizes(ptx));
    assertTrue(ptx.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 \t{%r3, %r4, %r5, %r6}, [%r1+64];"), ptx);
    Path ptxas = TestPtx.ptxas();
    if (ptxas != null) {
      TestPtx.assemble(ptxas, ptx, "sm_90");
      TestPtx.assemble(ptxas, ptx, "sm_80");
    }
  }

  /** wgmma (sm_90a) reads shared memory through descriptors only: its instructions pass through, unchecked. */
  @Test
  void wgmmaFencesAndGroupsPassThrough() {
    String body = "\twgmma.fence.sync.aligned;\n\twgmma.commit_group.sync.aligned;\n"
        + "\twgmma.wait_group.sync.aligned 0;\n\tst.global.u32 [%rd2], %r1;";
    InstrumentedModule m = PtxInstrumenter.instrument(TestPtx.kernel("sm_90a", body));
    assertEquals(1, m.sitesOf("k").size(), "only the store is checked");
    assertTrue(m.ptx().contains("wgmma.wait_group.sync.aligned \t0;"), m.ptx());
    Path ptxas = TestPtx.ptxas();
    if (ptxas != null) {
      TestPtx.assemble(ptxas, m.ptx(), "sm_90a");
    }
  }

  @Test
  void aKernelWithoutAccessesStillTakesTheGuard() {
    String ptx = PtxInstrumenter.instrument(TestPtx.kernel("")).ptx();
    ParamLayout layout = PtxEntries.parse(ptx).entries().get("k");
    assertEquals(2, layout.count());
    assertEquals(ParamType.INT64, layout.get(1).type());
  }

  private static List<Long> sizes(String ptx) {
    Matcher m = Pattern.compile("add\\.s64 \t%thaw_rd2, %thaw_rd1, (\\d+);").matcher(ptx);
    List<Long> out = new ArrayList<>();
    while (m.find()) {
      out.add(Long.parseLong(m.group(1)));
    }
    return out;
  }

  private static void assemblesWhereptxasIs(String ptx) {
    Path ptxas = TestPtx.ptxas();
    if (ptxas != null) {
      TestPtx.assemble(ptxas, ptx, "sm_90");
    }
  }
}
