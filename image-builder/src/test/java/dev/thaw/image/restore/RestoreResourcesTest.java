package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/** Restore resources made partly behind their constructor: the whole pool of events arrives, and close waits for it. */
class RestoreResourcesTest {

  @Test
  void theEventsMadeBehindFillThePoolAndARestoreNeverWaitsForThem() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext context = driver.createContext(0)) {
      try (RestoreResources r = RestoreResources.create(context)) {
        assertTrue(r.pooledEvents() >= RestoreResources.EVENTS_AHEAD, "the first ones at once");
        r.eventsMade().join();
        assertEquals(RestoreResources.DEFAULT_EVENTS, r.pooledEvents());
        assertEquals(List.of("streams", "upload arena", "events", "staging"),
            List.copyOf(r.creationMillis().keySet()));
      }
      // Closed while its events are still being made: it waits for them, and frees every one.
      RestoreResources early = RestoreResources.create(context);
      early.close();
      assertTrue(early.eventsMade().isDone());
    }
  }

  /**
   * A pool worker makes what is behind (the staging's other buffers, the other events) only once the image it
   * prepares at start is done, so that the pinning does not hold the driver its prepare needs; closed before that,
   * nothing waits for a gate that may never open.
   */
  @Test
  void whatIsMadeBehindWaitsForItsGateAndCloseNeverWaitsForTheGate() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext context = driver.createContext(0)) {
      CompletableFuture<Void> gate = new CompletableFuture<>();
      try (RestoreResources r = RestoreResources.create(context, gate)) {
        Thread.sleep(200);
        assertEquals(RestoreResources.EVENTS_AHEAD, r.pooledEvents(), "the gate is shut: only the first events");
        assertTrue(!r.staging().allocated().isDone(), "and only the first staging buffer");
        gate.complete(null);
        r.eventsMade().join();
        r.staging().allocated().join();
        assertEquals(RestoreResources.DEFAULT_EVENTS, r.pooledEvents());
      }
      RestoreResources shut = RestoreResources.create(context, new CompletableFuture<Void>());
      shut.close();
      assertTrue(shut.eventsMade().isDone() && shut.staging().allocated().isDone(), "closed without the gate");
    }
  }
}
