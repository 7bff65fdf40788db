package dev.thaw.runtime.gpu.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class DeviceAddressArenaTest {

  private static final long G = 2L << 20;
  private static final long BASE = DeviceAddressArena.CANDIDATE_BASES[0];

  @Test
  void handsOutFirstFitAlignedRangesAndReusesFreedOnes() {
    DeviceAddressArena a = new DeviceAddressArena(BASE, 16 * G);
    assertEquals(BASE, a.allocate(3 * G, G));
    assertEquals(BASE + 3 * G, a.allocate(G, G));
    assertEquals(BASE + 4 * G, a.allocate(2 * G, G));
    a.release(BASE, 3 * G);
    assertEquals(BASE, a.allocate(2 * G, G), "the freed hole is reused");
    assertEquals(BASE + 2 * G, a.allocate(G, G));
    assertEquals(BASE + 6 * G, a.allocate(10 * G, G));
    assertEquals(0, a.allocate(G, G), "full");
  }

  @Test
  void takesAnExactRangeOnlyWhenAllOfItIsFree() {
    DeviceAddressArena a = new DeviceAddressArena(BASE, 16 * G);
    assertTrue(a.allocateAt(BASE + 4 * G, 2 * G));
    assertFalse(a.allocateAt(BASE + 5 * G, 2 * G));
    assertFalse(a.allocateAt(BASE + 3 * G, 2 * G));
    assertTrue(a.allocateAt(BASE + 2 * G, 2 * G));
    assertEquals(BASE, a.allocate(2 * G, G));
    assertEquals(BASE + 6 * G, a.allocate(G, G));
    a.release(BASE + 4 * G, 2 * G);
    assertTrue(a.allocateAt(BASE + 4 * G, 2 * G));
  }

  @Test
  void coalescesOnReleaseAndRefusesADoubleRelease() {
    DeviceAddressArena a = new DeviceAddressArena(BASE, 4 * G);
    long x = a.allocate(G, G);
    long y = a.allocate(G, G);
    long z = a.allocate(2 * G, G);
    a.release(y, G);
    a.release(x, G);
    a.release(z, 2 * G);
    assertEquals(BASE, a.allocate(4 * G, G), "all four pieces merged back into one");
    a.release(BASE, 4 * G);
    assertThrows(IllegalStateException.class, () -> a.release(BASE + G, G));
  }

  @Test
  void knowsItsBounds() {
    DeviceAddressArena a = new DeviceAddressArena(BASE, 4 * G);
    assertTrue(a.contains(BASE, 4 * G));
    assertFalse(a.contains(BASE - G, 2 * G));
    assertFalse(a.contains(BASE + 3 * G, 2 * G));
    assertFalse(a.contains(0x7f00_0000_0000L, G));
  }
}
