package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.hbm.ExportedSlab;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins when a pool worker write-protects its image's read-only slab, with real worker processes on the sim device,
 * the real store and the host cache: never while a request runs (the probe's {@code access} request sees the same
 * access at its start and its end, though the restore completes while it runs), once the worker is idle after an
 * answer, and at the latest at EXPORT. The probe's {@code secret} is read-only by its profile (an {@code echo}), on a
 * slab of its own. Copies are slowed (the sim device's bandwidth model: 2 MiB in about a second) so that the first
 * request starts before the restore is complete. The sim device faults a mapping made read-only while any work of its
 * context is in flight, so a protection under the restore's copies or a request's kernels would poison the worker.
 * (No warm-up: its rehearsals copy megabytes, which at that bandwidth would take minutes.)
 */
class SlabProtectionWorkerTest {

  /** 2 MiB in ~1 s: the first request always starts in the restore window. */
  private static final Map<String, String> SLOW_COPIES = Map.of("THAW_SIM_COPY_GBPS", "0.002");

  @TempDir Path dir;

  @Test
  void theSlabIsProtectedBetweenRequestsNeverDuringOne() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    assertEquals(Set.of("secret"), probe.result().manifest().readOnlyAllocations());
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setHostCachePath(cache.path())
          .setEnvironment(SLOW_COPIES).setWarmupLaunches(0));
      try {
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        w.becomeBlocking("probe", probe.manifest(),
            ImageSource.hostCache(cache.stage("probe", ImageManifest.read(probe.manifest()), store), storePath));
        // The restore completes during this request (its read waits for secret's copy, then it holds).
        JsonNode first = w.invokeBlocking(json("{\"op\": \"access\", \"holdMillis\": 300}")).jsonTree();
        assertEquals("READ_WRITE", first.get("before").asText(), "the first request starts in the restore window: "
            + first);
        assertEquals(first.get("before"), first.get("after"), "nothing changes a slab's access under a request");
        w.resident().get();
        // The worker protects the slab once idle a while after an answer (ContextPoolOptions.protectAfterIdle,
        // 20 ms), never under a request: each request sees one access throughout, READ_WRITE until an idle stretch,
        // then READ.
        JsonNode second = w.invokeBlocking(json("{\"op\": \"access\"}")).jsonTree();
        for (int i = 0; i < 300 && !second.get("before").asText().equals("READ"); i++) {
          assertEquals(second.get("before"), second.get("after"), "nothing changes under a request: " + second);
          Thread.sleep(100);
          second = w.invokeBlocking(json("{\"op\": \"access\"}")).jsonTree();
        }
        assertEquals("READ", second.get("before").asText(), second.toString());
        assertEquals("READ", second.get("after").asText(), second.toString());
        // A store into it is refused now (a memset into read-only memory: refused at the call, not sticky).
        assertThrows(WorkerException.class, () -> w.invokeBlocking(json("{\"op\": \"fill\", \"value\": 1}")));
        JsonNode echo = w.invokeBlocking(json("{\"op\": \"echo\", \"value\": 7}")).jsonTree();
        assertEquals(7, echo.get("echo").asInt(), "the worker serves on: " + echo);
        w.release();
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  /**
   * A worker whose only answer came before its restore completed protects its slab once it is resident (tried again
   * after each idle stretch), at EXPORT at the latest, so the HBM tier gets it.
   */
  @Test
  void aWorkerProtectsAtExportWhenNoIdlePointCameAfterItsRestore() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setHostCachePath(cache.path())
          .setEnvironment(SLOW_COPIES).setWarmupLaunches(0));
      try {
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        w.becomeBlocking("probe", probe.manifest(),
            ImageSource.hostCache(cache.stage("probe", ImageManifest.read(probe.manifest()), store), storePath)
                .withResident(List.of()));
        // Answered before the restore completes: the idle point after it finds it still copying.
        JsonNode early = w.invokeBlocking(json("{\"op\": \"echo\", \"value\": 1}")).jsonTree();
        assertEquals(1, early.get("echo").asInt(), early.toString());
        w.resident().get();
        List<ExportedSlab> slabs = w.exportReadOnly().get();
        assertEquals(1, slabs.size(), "protected at EXPORT, so handed on: " + slabs);
        assertEquals(List.of("secret"), slabs.get(0).buffers());
        JsonNode after = w.invokeBlocking(json("{\"op\": \"access\"}")).jsonTree();
        assertEquals("READ", after.get("before").asText(), after.toString());
        assertFalse(after.get("pid").isMissingNode());
        w.release();
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }
}
