package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the pool's use of the host image cache with real processes: every worker maps and registers the arena at
 * start, becomes an image from it with no store read, serves from it, gives the cache lease back once the restore
 * is complete, and reads from the store what the placement does not cover.
 */
class HostCacheWorkerTest {

  @TempDir Path dir;

  @Test
  void workersRegisterTheCacheAtStartAndRestoreFromIt() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    PoolTestImages.Built other = PoolTestImages.build(storePath, "other", PoolProbeFunction.class.getName(),
        "{\"bytes\": 70000}", null);
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setHostCachePath(cache.path()));
      try {
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        assertTrue(w.start().phases().containsKey("hostCache"), w.start().toString());

        CacheLease lease = cache.stage("probe", ImageManifest.read(probe.manifest()), store);
        BecomeResult b = w.becomeBlocking("probe", probe.manifest(), ImageSource.hostCache(lease, storePath));
        assertEquals("cache", b.source(), b.toString());
        // The probe reads memory with raw context copies, which on-demand restore does not gate.
        RestoreCompletion done = w.resident().get();
        JsonNode scan = w.invokeBlocking(json("{\"op\": \"scan\"}")).jsonTree();
        assertEquals(0, scan.get("headMismatches").asLong(), "the image's bytes came from the arena: " + scan);
        assertEquals(0, scan.get("tailNonZero").asLong(), scan.toString());
        assertEquals(probe.result().manifest().totalBytes(), done.hostBytes(), "every byte from the arena: " + done);
        assertEquals(0, done.storeBytes(), done.toString());
        assertTrue(!lease.isOpen(), "the worker gives the lease back once its restore is complete");
        w.release();

        // A placement that lacks the image's chunks: the restore reads them from the store instead.
        Worker w2 = pool.acquire(0, WAIT);
        seen.add(w2.pid());
        CacheLease probeLease = cache.stage("probe", ImageManifest.read(probe.manifest()), store);
        w2.becomeBlocking("other", other.manifest(), ImageSource.hostCache(probeLease, storePath));
        RestoreCompletion fromStore = w2.resident().get();
        JsonNode otherScan = w2.invokeBlocking(json("{\"op\": \"scan\"}")).jsonTree();
        assertEquals(0, otherScan.get("headMismatches").asLong(), otherScan.toString());
        assertTrue(fromStore.storeBytes() > 0 && fromStore.hostBytes() < fromStore.bytes(), fromStore.toString());
        w2.release();
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  @Test
  void aCacheSourceForAWorkerWithoutTheCacheIsATypedImageError() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        CacheLease lease = cache.stage("probe", ImageManifest.read(probe.manifest()), store)) {
      ContextPool pool = ContextPool.create(PoolTesting.options(storePath));
      try {
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        WorkerException e = assertThrows(WorkerException.class,
            () -> w.becomeBlocking("probe", probe.manifest(), ImageSource.hostCache(lease, storePath)));
        assertEquals(WorkerErrorKind.IMAGE, e.kind());
        assertTrue(e.getMessage().contains("maps none"), e.getMessage());
        w.release();
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }
}
