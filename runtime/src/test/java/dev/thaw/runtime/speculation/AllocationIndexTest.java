package dev.thaw.runtime.speculation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.thaw.runtime.function.AllocationRecord;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Pins the half-open containment lookup and the gaps between allocations. */
class AllocationIndexTest {

  private final AllocationIndex index = AllocationIndex.of(List.of(
      new AllocationRecord("c", 0x5000, 0x100), new AllocationRecord("a", 0x1000, 0x10),
      new AllocationRecord("b", 0x1010, 0x20)));

  @Test
  void findsTheAllocationContainingAnAddressWhateverTheInsertionOrder() {
    assertEquals("a", index.name(index.find(0x1000)));
    assertEquals("a", index.name(index.find(0x100f)));
    assertEquals("b", index.name(index.find(0x1010)), "touching allocations: the end belongs to the next");
    assertEquals("c", index.name(index.find(0x50ff)));
    assertEquals(-1, index.find(0x1030), "one past the end");
    assertEquals(-1, index.find(0xfff));
    assertEquals(-1, index.find(0));
    assertEquals(-1, index.find(-1L), "a negative value is no device address");
    assertEquals(-1, AllocationIndex.EMPTY.find(0x1000));
  }

  @Test
  void nextStartAfterSkipsToTheFollowingAllocation() {
    assertEquals(0x5000, index.nextStartAfter(0x1030));
    assertEquals(0x1010, index.nextStartAfter(0x1000));
    assertEquals(Long.MAX_VALUE, index.nextStartAfter(0x5000));
  }

  @Test
  void refusesOverlaps() {
    assertThrows(IllegalArgumentException.class, () -> AllocationIndex.of(List.of(
        new AllocationRecord("a", 0x1000, 0x100), new AllocationRecord("b", 0x10ff, 0x10))));
  }
}
