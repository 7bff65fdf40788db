package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins prepared images with real worker processes: idle workers prepare a registered image ahead (a BECOME then
 * names it, carries no manifest, and parses nothing), serve it byte for byte as an unprepared BECOME would, and a
 * PREPARE that fails leaves the worker usable, sent the image whole.
 */
class PreparedImageTest {

  @TempDir Path dir;

  @Test
  void aPreparedImageBecomesWithoutItsManifestAndServesTheSameBytes() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      ImageManifest manifest = ImageManifest.read(probe.manifest());
      CacheLease staged = cache.stage("probe", manifest, store);
      staged.close();
      ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setHostCachePath(cache.path()));
      try {
        pool.prepare(new PreparedImage("probe@1", "probe", probe.manifest(), staged.placement()));
        assertTrue(pool.awaitPrepared(WAIT), "every idle worker answered its PREPARE: " + pool.stats());
        CacheLease lease = becomePreparedFromTheCache(pool, cache, probe, manifest,
            new PreparedImage("probe@1", "probe", probe.manifest(), staged.placement()), storePath, seen);
        assertFalse(lease.isOpen(), "the lease goes back once the restore is complete");
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  @Test
  void aWorkerThatCannotPrepareAnImageIsSentItWhole() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(PoolTesting.options(storePath));
    try {
      // Not a manifest: every worker's PREPARE fails, and the worker stays blank and usable.
      PreparedImage broken = new PreparedImage("probe@broken", "probe",
          "{\"schemaVersion\": 1}".getBytes(StandardCharsets.UTF_8), null);
      pool.prepare(broken);
      pool.prepare(new PreparedImage("other@1", "other", "not json".getBytes(StandardCharsets.UTF_8), null));
      assertTrue(pool.awaitPrepared(WAIT), "a failed PREPARE is answered too: " + pool.stats());
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      BecomeResult b = w.becomeBlocking(new PreparedImage("probe@broken", "probe", probe.manifest(), null),
          ImageSource.store(storePath));
      assertTrue(b.phases().containsKey("manifest"), "sent whole, parsed in the BECOME: " + b);
      JsonNode echo = w.invokeBlocking(json("{\"op\": \"echo\", \"value\": 7}")).jsonTree();
      assertEquals(7, echo.get("echo").asInt(), echo.toString());
      w.release();
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void aWorkerPreparesTheImagesItIsToldAtStartAndNamesThemInReady() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    List<Long> seen = new ArrayList<>();
    // A tag the store does not hold is left out (the worker says why on its stderr) and the worker starts all the same.
    ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setPrepareAtStart(List.of("missing", "probe")));
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      assertTrue(w.start().phases().containsKey("prepareAtStart"), "prepared before READY: " + w.start());
      // No pool.prepare, so no PREPARE: the BECOME names the key only because READY said the worker has it.
      BecomeResult b = w.becomeBlocking(new PreparedImage(PreparedImage.keyOf("probe", probe.manifest()), "probe",
          probe.manifest(), null), ImageSource.store(storePath));
      assertTrue(b.phases().containsKey("prepared"), "the worker had it prepared from its start: " + b);
      assertFalse(b.phases().containsKey("manifest"), "and parsed no manifest in the BECOME: " + b);
      assertEquals(0.0, b.prepareWaitMillis(), 0.5, "and nothing was waited for: " + b);
      w.resident().get();
      JsonNode scan = w.invokeBlocking(json("{\"op\": \"scan\"}")).jsonTree();
      assertEquals(0, scan.get("headMismatches").asLong(), "the image's bytes: " + scan);
      w.release();
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void anImagePreparedAtStartLearnsWhereTheHostCacheHoldsItFromALaterPrepare() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      ImageManifest manifest = ImageManifest.read(probe.manifest());
      ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setHostCachePath(cache.path())
          .setPrepareAtStart(List.of("probe")));
      try {
        assertTrue(pool.awaitIdle(WAIT));
        // Staged after the workers prepared it: the PREPARE that follows carries only the placement.
        CacheLease staged = cache.stage("probe", manifest, store);
        staged.close();
        PreparedImage image = new PreparedImage(PreparedImage.keyOf("probe", probe.manifest()), "probe",
            probe.manifest(), staged.placement());
        pool.prepare(image);
        assertTrue(pool.awaitPrepared(WAIT), "the placement's PREPARE is answered: " + pool.stats());
        becomePreparedFromTheCache(pool, cache, probe, manifest, image, storePath, seen);
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  @Test
  void anImagePreparedWithoutAPlacementIsSentTheOneItsBecomeRestoresFrom() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(storePath, "probe");
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      ImageManifest manifest = ImageManifest.read(probe.manifest());
      ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setHostCachePath(cache.path()));
      try {
        // Prepared from the store: the PREPARE carried no placement, so the BECOME must carry the cache's.
        PreparedImage image = new PreparedImage("probe@1", "probe", probe.manifest(), null);
        pool.prepare(image);
        assertTrue(pool.awaitPrepared(WAIT), "every idle worker answered its PREPARE: " + pool.stats());
        cache.stage("probe", manifest, store).close();
        becomePreparedFromTheCache(pool, cache, probe, manifest, image, storePath, seen);
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  /**
   * The many-functions failure: more images registered than workers hold prepared. Before, every cold start of the
   * first image failed with "BECOME names prepared image ..., which this worker has not prepared" (the worker had
   * dropped it, the parent still named it). Registrations now fill free room only, a cold start brings its image
   * in and the least recently used out, and whatever a worker dropped goes whole.
   */
  @Test
  void moreImagesThanWorkersHoldPreparedColdStartEachOneByRecentUse() throws Exception {
    Path storePath = dir.resolve("store");
    List<PreparedImage> images = new ArrayList<>();
    for (String tag : List.of("m", "b1", "b2", "b3")) {
      PoolTestImages.Built built = PoolTestImages.probe(storePath, tag);
      images.add(new PreparedImage(PreparedImage.keyOf(tag, built.manifest()), tag, built.manifest(), null));
    }
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setMaxPreparedImages(2));
    try {
      images.forEach(pool::prepare);
      assertTrue(pool.awaitPrepared(WAIT), "every idle worker answered its PREPAREs: " + pool.stats());
      // m and b1 filled the room; b2 and b3 wait for their first cold start.
      assertTrue(becomeAndEcho(pool, images.get(0), storePath, seen).phases().containsKey("prepared"));
      BecomeResult whole = becomeAndEcho(pool, images.get(3), storePath, seen);
      assertTrue(whole.phases().containsKey("manifest"), "b3 was not prepared yet: sent whole, " + whole);
      pool.used("b3");
      pool.used("b2");
      assertTrue(pool.awaitPrepared(WAIT), "workers prepared b3 and b2 and dropped m and b1: " + pool.stats());
      assertTrue(becomeAndEcho(pool, images.get(2), storePath, seen).phases().containsKey("prepared"));
      BecomeResult dropped = becomeAndEcho(pool, images.get(0), storePath, seen);
      assertTrue(dropped.phases().containsKey("manifest"), "m was dropped, and went whole: " + dropped);
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  /** A worker that dropped images over its cap says so, and a BECOME of one of them goes whole. */
  @Test
  void aWorkerThatDropsPreparedImagesSaysSoAndIsSentThemWhole() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.Built a = PoolTestImages.probe(storePath, "a");
    PoolTestImages.Built b = PoolTestImages.probe(storePath, "b");
    List<Long> seen = new ArrayList<>();
    // Two prepared at start, a cap of one: the next PREPARE makes the worker drop both and say which.
    ContextPool pool = ContextPool.create(PoolTesting.options(storePath).setPrepareAtStart(List.of("a", "b"))
        .setMaxPreparedImages(1));
    try {
      PoolTestImages.Built c = PoolTestImages.probe(storePath, "c");
      pool.prepare(new PreparedImage(PreparedImage.keyOf("c", c.manifest()), "c", c.manifest(), null));
      assertTrue(pool.awaitPrepared(WAIT), pool.stats().toString());
      BecomeResult r = becomeAndEcho(pool, new PreparedImage(PreparedImage.keyOf("a", a.manifest()), "a",
          a.manifest(), null), storePath, seen);
      assertTrue(r.phases().containsKey("manifest"), "a was dropped for c: sent whole, not refused: " + r);
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  private static BecomeResult becomeAndEcho(ContextPool pool, PreparedImage image, Path storePath, List<Long> seen)
      throws Exception {
    Worker w = pool.acquire(0, WAIT);
    seen.add(w.pid());
    BecomeResult b = w.becomeBlocking(image, ImageSource.store(storePath));
    JsonNode echo = w.invokeBlocking(json("{\"op\": \"echo\", \"value\": 3}")).jsonTree();
    assertEquals(3, echo.get("echo").asInt(), image.name() + ": " + echo);
    w.release();
    return b;
  }

  /**
   * A worker becomes {@code image} from the host cache: it must name the prepared image (no manifest parsed), take
   * every byte from the arena and hold the image's bytes. Returns the cold start's lease.
   */
  private static CacheLease becomePreparedFromTheCache(ContextPool pool, HostImageCache cache,
      PoolTestImages.Built probe, ImageManifest manifest, PreparedImage image, Path storePath, List<Long> seen)
      throws Exception {
    Worker w = pool.acquire(0, WAIT);
    seen.add(w.pid());
    CacheLease lease = cache.lease("probe", manifest);
    assertNotNull(lease, "the image is still where its stage put it");
    BecomeResult b = w.becomeBlocking(image, ImageSource.hostCache(lease, storePath));
    assertTrue(b.phases().containsKey("prepared"), "the worker had it prepared: " + b);
    assertFalse(b.phases().containsKey("manifest"), "and parsed no manifest: " + b);
    // Its modules were loaded ahead: "load modules" is near zero, but a time is no assertion (a loaded machine took
    // 0.16 ms once); the "prepared" phase above is what says the worker took the prepared image.
    RestoreCompletion done = w.resident().get();
    assertEquals(probe.result().manifest().totalBytes(), done.hostBytes(), "every byte from the host cache: " + done);
    JsonNode scan = w.invokeBlocking(json("{\"op\": \"scan\"}")).jsonTree();
    assertEquals(0, scan.get("headMismatches").asLong(), "the image's bytes, from the arena: " + scan);
    w.release();
    return lease;
  }
}
