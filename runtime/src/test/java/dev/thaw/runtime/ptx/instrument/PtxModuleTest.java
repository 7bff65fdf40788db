package dev.thaw.runtime.ptx.instrument;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.ptx.PtxSyntaxException;
import dev.thaw.runtime.ptx.instrument.PtxStatement.BlockClose;
import dev.thaw.runtime.ptx.instrument.PtxStatement.BlockOpen;
import dev.thaw.runtime.ptx.instrument.PtxStatement.Directive;
import dev.thaw.runtime.ptx.instrument.PtxStatement.Instruction;
import dev.thaw.runtime.ptx.instrument.PtxStatement.Label;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Parse and print of PTX: nvcc's output survives unchanged in meaning; bodies are read statement by statement. */
class PtxModuleTest {

  static Stream<String> modules() {
    return TestPtx.modules().keySet().stream().sorted();
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("modules")
  void printOfParsedNvccPtxAssemblesToTheSameCubin(String name) {
    Path ptxas = TestPtx.ptxas();
    Assumptions.assumeTrue(ptxas != null, "ptxas is not on the PATH");
    String ptx = TestPtx.modules().get(name);
    for (String arch : List.of("sm_80", "sm_90")) {
      byte[] original = TestPtx.assemble(ptxas, ptx, arch);
      byte[] printed = TestPtx.assemble(ptxas, PtxModule.parse(ptx).print(), arch);
      assertArrayEquals(original, printed, name + ": the printed module assembles to another " + arch + " cubin");
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("modules")
  void printIsAFixedPoint(String name) {
    String once = PtxModule.parse(TestPtx.modules().get(name)).print();
    assertEquals(once, PtxModule.parse(once).print(), name);
  }

  @Test
  void readsFunctionsParametersAndStatements() {
    String ptx = """
        .version 8.0
        .target sm_90
        .address_size 64
        .global .align 4 .b8 table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        .func (.param .b32 f_ret) f(.param .b64 f_p0);
        .visible .entry k(
          .param .u64 k_p0,
          .param .align 8 .b8 k_p1[16]
        )
        .maxntid 128, 1, 1
        {
          .reg .pred %p<2>;
          .reg .b64 %rd<4>;
          .reg .b32 %r<4>;
        $L_top: // a comment
          @!%p1 ld.global.nc.v2.u32 {%r1, %r2}, [%rd1+-8];
          { .reg .b16 %rs1; mov.b32 {%rs1, _}, %r1; }
          call.uni (retval0),
            f,
            (param0, param1);
          bra.uni $L_top;
        }
        """;
    PtxModule m = PtxModule.parse(ptx);
    assertEquals(2, m.functions().size());
    PtxFunction decl = m.functions().get(0);
    assertEquals("f", decl.name());
    assertFalse(decl.hasBody());
    assertEquals(List.of(".param .b64 f_p0"), decl.params());
    PtxFunction k = m.functions().get(1);
    assertTrue(k.isEntry());
    assertEquals(List.of(".param .u64 k_p0", ".param .align 8 .b8 k_p1[16]"), k.params());
    List<PtxStatement> body = k.body();
    assertEquals(new Directive(".reg .pred %p<2>", true, 12), body.get(0));
    assertEquals(new Label("$L_top", 15), body.get(3));
    Instruction ld = (Instruction) body.get(4);
    assertEquals("!%p1", ld.guard());
    assertEquals("ld", ld.root());
    assertEquals(List.of("global", "nc", "v2", "u32"), ld.modifiers());
    assertEquals(List.of("{%r1, %r2}", "[%rd1+-8]"), ld.operands());
    assertEquals(16, ld.line());
    assertTrue(body.get(5) instanceof BlockOpen);
    assertEquals(new Directive(".reg .b16 %rs1", true, 17), body.get(6));
    assertEquals(List.of("{%rs1, _}", "%r1"), ((Instruction) body.get(7)).operands());
    assertTrue(body.get(8) instanceof BlockClose);
    Instruction call = (Instruction) body.get(9);
    assertEquals(List.of("(retval0)", "f", "(param0, param1)"), call.operands());
    assertNull(call.guard());
    String printed = m.print();
    assertTrue(printed.contains(".global .align 4 .b8 table[8] = {1, 2, 3, 4, 5, 6, 7, 8};"), printed);
    assertTrue(printed.contains(".maxntid 128, 1, 1"), printed);
    assertTrue(printed.contains("@!%p1 ld.global.nc.v2.u32 \t{%r1, %r2}, [%rd1+-8];"), printed);
  }

  @Test
  void refusesTextItCannotRead() {
    PtxSyntaxException e = assertThrows(PtxSyntaxException.class, () -> PtxModule.parse(TestPtx.kernel("\t1: st.global.u32 [%rd2], %r1;")));
    assertTrue(e.getMessage().contains("cannot read instruction"), e.getMessage());
    assertEquals(16, e.line()); // the body starts on line 16 of TestPtx.kernel
    e = assertThrows(PtxSyntaxException.class, () -> PtxModule.parse(".version 8.0\n.target sm_90\n.entry k()\n{\n ret;\n"));
    assertTrue(e.getMessage().contains("end of file"), e.getMessage());
  }
}
