package dev.thaw.runtime.ptx.instrument;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The guard table's bytes are the layout the instrumented PTX reads, and violations decode from it. */
class GuardTableTest {

  @Test
  void bytesFollowTheDocumentedLayout() {
    GuardTable t = GuardTable.of(new long[] {0x7f0000000000L, 0x7f0000200000L},
        new long[] {0x7f0000001000L, 0x7f0000200010L}, new int[] {GuardTable.READ, GuardTable.READ_WRITE}, 3);
    ByteBuffer b = t.toBytes().order(ByteOrder.LITTLE_ENDIAN);
    assertEquals(32 + 2 * 32 + 3 * 24, b.capacity());
    assertEquals(2, b.getLong(0));
    assertEquals(3, b.getLong(8));
    assertEquals(0, b.getLong(16));
    assertEquals(0x54474854, b.getInt(24));
    assertEquals(1, b.getInt(28));
    assertEquals(0x7f0000000000L, b.getLong(32));
    assertEquals(0x7f0000001000L, b.getLong(40));
    assertEquals(1, b.getLong(48));
    assertEquals(0, b.getLong(56));
    assertEquals(0x7f0000200000L, b.getLong(64));
    assertEquals(0x7f0000200010L, b.getLong(72));
    assertEquals(3, b.getLong(80));
    // These offsets are also constants of the emitted PTX: keep them in step.
    assertEquals(32, GuardTable.RANGES_OFFSET);
    assertEquals(32, GuardTable.RANGE_BYTES);
    assertEquals(24, GuardTable.VIOLATION_BYTES);
  }

  @Test
  void readsTheRecordedViolationsAndSaysWhenSomeWereDropped() {
    GuardTable t = GuardTable.builder().allow(0x1000, 0x100, GuardTable.READ).maxViolations(2).build();
    ByteBuffer b = t.toBytes().order(ByteOrder.LITTLE_ENDIAN);
    assertTrue(t.readViolations(b).clean());
    b.putLong(16, 3);
    int at = 32 + 32;
    b.putLong(at, 0x2000).putInt(at + 8, 4).putInt(at + 12, 17).putInt(at + 16, 2);
    b.putLong(at + 24, 0x1100).putInt(at + 32, 16).putInt(at + 36, 5).putInt(at + 40, 3);
    ViolationReport r = t.readViolations(b);
    assertEquals(3, r.total());
    assertTrue(r.truncated());
    assertFalse(r.clean());
    assertEquals(List.of(new GuardViolation(17, 0x2000, 4, AccessOp.WRITE),
        new GuardViolation(5, 0x1100, 16, AccessOp.ATOMIC)), r.recorded());
  }

  @Test
  void refusesBadRangesAndAChangedHeader() {
    assertThrows(IllegalArgumentException.class, () -> GuardTable.of(new long[] {1}, new long[] {}, new int[] {1}));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> GuardTable.of(new long[] {0x20}, new long[] {0x10}, new int[] {1}));
    assertEquals("range 0 ends (0x10) before it starts (0x20)", e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> GuardTable.of(new long[] {0}, new long[] {1}, new int[] {4}));
    assertEquals("range 0 has kind 4; expected 1, 2 or 3", e.getMessage());
    GuardTable t = GuardTable.builder().allow(0, 1, 1).build();
    ByteBuffer b = t.toBytes().order(ByteOrder.LITTLE_ENDIAN);
    b.putLong(0, 99);
    IllegalStateException s = assertThrows(IllegalStateException.class, () -> t.readViolations(b));
    assertTrue(s.getMessage().contains("header was changed"), s.getMessage());
  }

  @Test
  void aRangeEndingAtTheTopOfTheAddressSpaceIsAccepted() {
    GuardTable t = GuardTable.of(new long[] {0x7fffffffff00L}, new long[] {0xffffffffffffffffL}, new int[] {3});
    assertEquals(1, t.rangeCount());
  }
}
