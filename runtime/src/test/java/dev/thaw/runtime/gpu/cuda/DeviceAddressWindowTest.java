package dev.thaw.runtime.gpu.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class DeviceAddressWindowTest {

  private static final long MIB2 = 2L << 20;

  @Test
  void takesTheFirstFreeCandidateAndHandsOutAlignedDisjointHints() {
    DeviceAddressWindow w = DeviceAddressWindow.probe(a -> a != DeviceAddressWindow.CANDIDATE_BASES[0]);
    long base = DeviceAddressWindow.CANDIDATE_BASES[1];
    assertEquals(base, w.base());
    assertEquals(base, w.nextHint(4 * MIB2, MIB2));
    assertEquals(base + 4 * MIB2, w.nextHint(MIB2, MIB2));
    assertEquals(base + 5 * MIB2, w.nextHint(MIB2, MIB2));
  }

  @Test
  void withoutAFreeCandidateLeavesPlacementToTheDriver() {
    DeviceAddressWindow w = DeviceAddressWindow.probe(a -> false);
    assertEquals(0, w.base());
    assertEquals(0, w.nextHint(MIB2, MIB2));
  }
}
