package dev.thaw.runtime.gpu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.jna.Pointer;
import java.util.List;
import org.junit.jupiter.api.Test;

class KernelArgsTest {

  private static final ParamLayout SAXPY = ParamLayout.ofAligned(List.of("a", "x", "y", "n"),
      List.of(ParamType.FLOAT32, ParamType.INT64, ParamType.INT64, ParamType.INT32), List.of(4, 8, 8, 4),
      List.of(4, 8, 8, 4));

  @Test
  void writesValuesAtTheirOffsetsAndPointsAtEachOne() {
    KernelArgs args = new KernelArgs(SAXPY).setAll(2.5f, 0x7f00_0000_0000L, 0x7f00_0020_0000L, 1000);
    args.checkComplete();
    assertEquals(2.5f, args.slab().getFloat(0));
    assertEquals(0x7f00_0000_0000L, args.slab().getLong(8));
    assertEquals(1000, args.slab().getInt(24));
    for (int i = 0; i < 4; i++) {
      long pointer = new Pointer(args.pointerArrayAddress()).getLong(8L * i);
      assertEquals(args.slabAddress() + SAXPY.get(i).offset(), pointer);
    }
  }

  @Test
  void refusesTheWrongCountTypeOrIndex() {
    KernelArgs args = new KernelArgs(SAXPY);
    assertThrows(IllegalArgumentException.class, () -> args.setAll(1f, 2L, 3L));
    IllegalArgumentException wrong = assertThrows(IllegalArgumentException.class, () -> args.set(1, 5));
    assertTrue(wrong.getMessage().contains("x (INT64"), wrong.getMessage());
    assertThrows(IllegalArgumentException.class, () -> args.set(0, 1.0));
    assertThrows(IllegalArgumentException.class, () -> args.set(4, 1));
    assertThrows(IllegalArgumentException.class, () -> args.set(-1, 1));
    assertThrows(IllegalArgumentException.class, () -> args.setAll(1f, "x", 3L, 4));
    assertThrows(IllegalArgumentException.class, () -> args.set(0, new byte[4]));
  }

  @Test
  void namesTheFirstParameterLeftUnset() {
    KernelArgs args = new KernelArgs(SAXPY).set(0, 1f).set(1, 1L).set(3, 1);
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, args::checkComplete);
    assertTrue(e.getMessage().contains("y"), e.getMessage());
  }

  @Test
  void untypedParametersTakeAnyValueOfTheirWidth() {
    ParamLayout untyped = new ParamLayout(List.of(new KernelParam(0, "param0", 0, 4, ParamType.UNTYPED),
        new KernelParam(1, "param1", 8, 8, ParamType.UNTYPED), new KernelParam(2, "param2", 16, 12, ParamType.UNTYPED)), 28);
    KernelArgs args = new KernelArgs(untyped).set(0, 1.5f).set(1, 7L).set(2, new byte[12]);
    args.set(0, 3).set(1, 2.0);
    args.checkComplete();
    assertThrows(IllegalArgumentException.class, () -> args.set(0, 1L));
    assertThrows(IllegalArgumentException.class, () -> args.set(2, new byte[8]));
  }

  @Test
  void aKernelWithoutParametersHasAnEmptySlab() {
    KernelArgs args = new KernelArgs(new ParamLayout(List.of(), 0)).setAll();
    args.checkComplete();
    assertEquals(0, args.layout().count());
  }
}
