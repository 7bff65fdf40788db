package dev.thaw.runtime.ptx.instrument;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.ptx.PtxEntries;
import org.junit.jupiter.api.Test;

/** The layout rule (original + one trailing .u64) and the argument copy, without a GPU. */
class ValidatingLauncherTest {

  private static final String PTX = """
      .version 8.0
      .target sm_90
      .address_size 64
      .visible .entry k(.param .u8 k_0, .param .u16 k_1, .param .u32 k_2, .param .u64 k_3, .param .f32 k_4,
          .param .f64 k_5, .param .align 8 .b8 k_6[12])
      {
        ret;
      }
      """;

  @Test
  void theInstrumentedLayoutIsTheOriginalPlusTheGuard() {
    ParamLayout original = PtxEntries.parse(PTX).entries().get("k");
    ParamLayout instrumented = PtxEntries.parse(PtxInstrumenter.instrument(PTX).ptx()).entries().get("k");
    ValidatingLauncher.checkLayouts(original, instrumented, "k");
    assertEquals(original, ValidatingLauncher.originalLayout(instrumented, "k"));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> ValidatingLauncher.checkLayouts(original, original, "k"));
    assertEquals("instrumented kernel k takes 7 parameters; expected the original 7 plus the guard", e.getMessage());
    ParamLayout other = PtxEntries.parse(PTX.replace(".param .u16 k_1", ".param .u32 k_1")).entries().get("k");
    e = assertThrows(IllegalArgumentException.class, () -> ValidatingLauncher.checkLayouts(other, instrumented, "k"));
    assertEquals("instrumented kernel k: parameter 1 is k_1 (INT16, 2 bytes at 2), the original's is "
        + "k_1 (INT32, 4 bytes at 4)", e.getMessage());
  }

  @Test
  void copiesEveryArgumentByType() {
    ParamLayout original = PtxEntries.parse(PTX).entries().get("k");
    ParamLayout instrumented = PtxEntries.parse(PtxInstrumenter.instrument(PTX).ptx()).entries().get("k");
    byte[] struct = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    KernelArgs from = new KernelArgs(original).setAll((byte) -3, (short) 700, 70000, 0x1234567890L, 1.5f, -2.25, struct);
    KernelArgs to = new KernelArgs(instrumented);
    ValidatingLauncher.copy(from, to);
    to.set(7, 0xabcdefL);
    to.checkComplete();
    byte[] a = new byte[original.totalSize()];
    byte[] b = new byte[original.totalSize()];
    from.slab().get(0, a);
    to.slab().get(0, b);
    assertArrayEquals(a, b);
    assertEquals(0xabcdefL, to.slab().getLong(instrumented.get(7).offset()));
  }
}
