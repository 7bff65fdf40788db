package dev.thaw.image.staging;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.thaw.image.staging.StagingRing;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The staging ring made partly ahead: every slot usable in ring order, and nothing left pinned after close. */
class StagingRingTest {

  @Test
  void buffersMadeOnTheRingsOwnThreadServeEverySlotAndAreFreedOnClose() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext context = driver.createContext(0)) {
      List<PinnedBuffer> seen = new ArrayList<>();
      try (StagingRing ring = StagingRing.allocate(context, 5, 8192, 1)) {
        assertEquals(5, ring.size());
        assertEquals(8192, ring.bytes());
        for (int round = 0; round < 2; round++) {
          for (int i = 0; i < ring.size(); i++) {
            int slot = ring.acquire();
            assertEquals(i, slot, "ring order");
            PinnedBuffer b = ring.buffer(slot);
            assertEquals(8192, b.size());
            b.slice(0, 8).putLong(0, round * 100L + i);
            if (round == 0) {
              seen.add(b);
            } else {
              assertEquals(seen.get(slot), b, "a slot keeps its buffer");
            }
            ring.release(slot);
          }
        }
        for (int i = 1; i < seen.size(); i++) {
          assertNotEquals(seen.get(0).address(), seen.get(i).address(), "every slot its own buffer");
        }
      }
      for (PinnedBuffer b : seen) {
        assertThrows(IllegalStateException.class, () -> b.slice(0, 8), "freed with the ring");
      }
    }
  }

  @Test
  void refusesToMakeNoBufferAtOnceOrMoreThanTheRing() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext context = driver.createContext(0)) {
      assertThrows(IllegalArgumentException.class, () -> StagingRing.allocate(context, 4, 4096, 0));
      assertThrows(IllegalArgumentException.class, () -> StagingRing.allocate(context, 4, 4096, 5));
    }
  }
}
