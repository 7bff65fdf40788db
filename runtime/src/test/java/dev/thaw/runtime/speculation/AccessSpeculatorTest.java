package dev.thaw.runtime.speculation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.KernelArgs;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.junit.jupiter.api.Test;

/** Pins the slot rule: which parameter bytes name which allocation, with which kind. */
class AccessSpeculatorTest {

  private static KernelArgs args(SpecSession s, KernelRef k, Object... values) {
    KernelArgs a = s.session.kernel(k).newArgs();
    a.setAll(values);
    return a;
  }

  @Test
  void pointersNameTheirAllocationsWithTheKindThePtxGives() {
    try (SpecSession s = new SpecSession()) {
      BufferRef x = s.floats("x", 64, 0);
      BufferRef y = s.floats("y", 64, 0);
      AccessSpeculator spec = new AccessSpeculator(s.session);
      KernelRef k = s.kernel("spec_args_only");
      AccessSet set = spec.speculate(k, args(s, k, s.address(x), s.address(y), 64));
      assertEquals("{x: READ, y: WRITE}", set.toString());
      // An interior pointer names its allocation; one past the end does not.
      set = spec.speculate(k, args(s, k, s.address(x) + 100, s.address(y) + 256, 64));
      assertEquals("{x: READ}", set.toString());
      // Two slots naming one allocation merge.
      set = spec.speculate(k, args(s, k, s.address(x), s.address(x) + 4, 64));
      assertEquals("{x: READ_WRITE}", set.toString());
    }
  }

  @Test
  void structFieldsAndPackedScalarsAreSlotsToo() {
    try (SpecSession s = new SpecSession()) {
      BufferRef in = s.floats("in", 16, 0);
      BufferRef out = s.floats("out", 16, 0);
      BufferRef sum = s.session.allocate("sum", 8);
      AccessSpeculator spec = new AccessSpeculator(s.session);
      KernelRef k = s.kernel("spec_struct");
      ByteBuffer p = ByteBuffer.allocate(32).order(ByteOrder.LITTLE_ENDIAN);
      p.putLong(0, s.address(in)).putInt(8, 16).putFloat(12, 2f).putLong(16, s.address(out)).putLong(24, s.address(sum));
      assertEquals("{in: READ, out: WRITE, sum: READ_WRITE}", spec.speculate(k, args(s, k, (Object) p.array())).toString());

      // Two ints that happen to spell an address name that allocation (PhoenixOS rule); the PTX never uses the
      // slot as an address, so the kind is READ: the restore waits, nothing is claimed written.
      KernelRef past = s.kernel("spec_write_past");
      long a = s.address(in) + 8;
      AccessSet set = spec.speculate(past, args(s, past, s.address(out), (int) a, (int) (a >>> 32)));
      assertEquals("{out: WRITE, in: READ}", set.toString());
    }
  }

  @Test
  void theIndexFollowsAllocationsAndFrees() {
    try (SpecSession s = new SpecSession()) {
      BufferRef x = s.floats("x", 64, 0);
      AccessSpeculator spec = new AccessSpeculator(s.session);
      KernelRef k = s.kernel("spec_write_past");
      long addr = s.address(x);
      assertEquals("{x: WRITE}", spec.speculate(k, args(s, k, addr, 1, 0)).toString());
      AllocationIndex before = spec.allocations();
      assertEquals(before, spec.allocations(), "not rebuilt while nothing changed");
      s.session.free(x);
      assertNull(spec.speculate(k, args(s, k, addr, 1, 0)).kindOf("x"));
      BufferRef z = s.session.allocate("z", 256);
      assertEquals(addr, s.address(z), "first fit gives the address back");
      assertEquals("{z: WRITE}", spec.speculate(k, args(s, k, addr, 1, 0)).toString());
    }
  }
}
