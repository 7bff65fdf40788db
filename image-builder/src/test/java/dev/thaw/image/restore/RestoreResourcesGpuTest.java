package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.staging.Staging;
import dev.thaw.image.staging.StagingRing;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * On CUDA ({@code THAW_DEVICE=cuda}; skipped, with the reason, where no GPU is usable): a worker's restore resources
 * made on a fresh context, as a worker makes them before READY, three times — every staging slot usable once pinned
 * behind, every part's cost printed (the split of the worker's {@code restoreResources} phase), and the same made
 * with every staging buffer pinned up front, for comparison.
 */
class RestoreResourcesGpuTest {

  @Test
  void restoreResourcesOnAFreshContextAndWhatEachPartCosts() {
    DriverAvailability a = CudaDriver.availability();
    Assumptions.assumeTrue(a.available(), () -> "no usable GPU: " + a.unavailabilityCause());
    try (CudaDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0)) {
      for (int round = 1; round <= 3; round++) {
        long t = System.nanoTime();
        RestoreResources r = RestoreResources.create(ctx);
        double made = (System.nanoTime() - t) / 1e6;
        StagingRing ring = r.staging();
        ring.allocated().join();
        double pinned = (System.nanoTime() - t) / 1e6;
        r.eventsMade().join();
        double evented = (System.nanoTime() - t) / 1e6;
        assertEquals(RestoreResources.DEFAULT_EVENTS, r.pooledEvents());
        assertEquals(RestoreResources.DEFAULT_STAGING_BUFFERS, ring.size());
        for (int i = 0; i < ring.size(); i++) {
          assertEquals(RestoreResources.DEFAULT_STAGING_BYTES, ring.buffer(i).size(), "slot " + i);
        }
        Map<String, Double> parts = r.creationMillis();
        assertEquals(List.of("streams", "upload arena", "events", "staging"), List.copyOf(parts.keySet()));
        System.out.printf("round %d: restore resources %.1f ms (%s); all %d staging buffers pinned at %.1f ms, all %d "
            + "events made at %.1f ms%n", round, made, parts, ring.size(), pinned, RestoreResources.DEFAULT_EVENTS,
            evented);
        r.close();
      }
      long t = System.nanoTime();
      try (StagingRing all = StagingRing.allocate(ctx, Staging.DEFAULT_BUFFERS, Staging.DEFAULT_BYTES)) {
        assertTrue(all.allocated().isDone());
        System.out.printf("a build's staging pinned up front: %.1f ms for %d x %d MiB%n",
            (System.nanoTime() - t) / 1e6, all.size(), all.bytes() >> 20);
      }
    }
  }
}
