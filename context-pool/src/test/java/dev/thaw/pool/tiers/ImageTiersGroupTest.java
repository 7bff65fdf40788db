package dev.thaw.pool.tiers;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.PoolProbeFunction;
import dev.thaw.pool.PoolTestImages;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins a group's registration in the node's tiers against the real store and host cache: every rank is staged and
 * the group is offered whole once they are; unregistered, the group and its ranks leave no state behind, even when
 * the unregistration comes while a rank is still being staged (the stage that finishes after it records nothing and
 * prepares no rank alone).
 */
class ImageTiersGroupTest {

  private static final List<String> RANKS = List.of("g-rank0:1", "g-rank1:1");
  private static final String AFTER = "after:1";

  @TempDir Path dir;

  @Test
  void aGroupUnregisteredWhileItsRanksStageLeavesNothingOfThemInTheTiers() throws Exception {
    Path storePath = dir.resolve("store");
    PoolTestImages.build(storePath, RANKS.get(0), PoolProbeFunction.class.getName(), "{\"bytes\": 70000}", null);
    PoolTestImages.build(storePath, RANKS.get(1), PoolProbeFunction.class.getName(), "{\"bytes\": 90000}", null);
    PoolTestImages.probe(storePath, AFTER);
    try (RocksChunkStore real = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      List<ImageManifest> manifests = List.of(ImageManifest.read(real.manifest(RANKS.get(0)).orElseThrow()),
          ImageManifest.read(real.manifest(RANKS.get(1)).orElseThrow()));
      ImageManifest after = ImageManifest.read(real.manifest(AFTER).orElseThrow());

      // Registered, then staged whole: each rank cached, the group offered; unregistered, all of it gone.
      try (Held store = new Held(real)) {
        ContextPool pool = ContextPool.create(blankPool(storePath));
        ImageTiers tiers = tiers(pool, store.store(), storePath);
        try {
          store.mayRead.countDown();
          tiers.registerGroup("g:1", RANKS, manifests);
          awaitDrained(tiers, after);
          for (String rank : RANKS) {
            assertEquals("cached", tiers.state(rank).hostCache(), rank);
          }
          assertNotNull(tiers.preparedGroup("g:1"), "offered whole once every rank is staged");
          tiers.unregister("g:1");
          assertNull(tiers.preparedGroup("g:1"));
          RANKS.forEach(rank -> assertNull(tiers.state(rank), rank));
        } finally {
          tiers.close();
          pool.close();
        }
      }

      // Unregistered while rank 0's stage reads: what finishes after records nothing and prepares nothing.
      try (Held store = new Held(real)) {
        ContextPool pool = ContextPool.create(blankPool(storePath));
        ImageTiers tiers = tiers(pool, store.store(), storePath);
        try {
          tiers.registerGroup("g:1", RANKS, manifests);
          assertTrue(store.reading.await(60, TimeUnit.SECONDS), "rank 0's stage reads");
          tiers.unregister("g:1");
          store.mayRead.countDown();
          awaitDrained(tiers, after);
          for (String rank : RANKS) {
            assertNull(tiers.state(rank), rank + " staged after its group was unregistered leaves no state");
          }
          assertNull(tiers.preparedGroup("g:1"), "the group is not offered after it was unregistered");
          assertEquals(0, tiers.cache().stats().pinnedBytes(), tiers.cache().stats().toString());
        } finally {
          tiers.close();
          pool.close();
        }
      }
    }
  }

  /** A pool that starts no worker: the tiers offer it what to prepare, and nothing here needs a process. */
  private static ContextPoolOptions blankPool(Path storePath) {
    return new ContextPoolOptions().setIdleTarget(0).setStorePath(storePath).setDeviceChoice("sim");
  }

  private static ImageTiers tiers(ContextPool pool, ChunkStore store, Path storePath) throws Exception {
    HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16L << 20));
    return new ImageTiers(pool, cache, 0, store, storePath, List.of(0), ImageTiers.Staging.ALWAYS);
  }

  /** The real store, whose chunk reads wait until the test lets them: a stage lasts as long as the test says. */
  private static final class Held implements AutoCloseable {
    final CountDownLatch reading = new CountDownLatch(1);
    final CountDownLatch mayRead = new CountDownLatch(1);
    private final ChunkStore real;

    Held(ChunkStore real) {
      this.real = real;
    }

    ChunkStore store() {
      return (ChunkStore) Proxy.newProxyInstance(ChunkStore.class.getClassLoader(), new Class<?>[] {ChunkStore.class},
          (proxy, method, args) -> {
            if (method.getName().startsWith("readChunk")) {
              reading.countDown();
              if (!mayRead.await(60, TimeUnit.SECONDS)) {
                throw new AssertionError("the test never let the stage read");
              }
            }
            if (method.getName().equals("close")) {
              return null;
            }
            try {
              return method.invoke(real, args);
            } catch (InvocationTargetException e) {
              throw e.getCause();
            }
          });
    }

    @Override
    public void close() {
      mayRead.countDown();
    }
  }

  /** Stages an image behind what the staging thread has queued and waits for it: all before it is done then. */
  private static void awaitDrained(ImageTiers tiers, ImageManifest after) throws Exception {
    tiers.register(AFTER, after);
    for (int i = 0; i < 1200; i++) {
      ImageTiers.TierState s = tiers.state(AFTER);
      if (s != null && !s.hostCache().equals("staging")) {
        tiers.unregister(AFTER);
        return;
      }
      Thread.sleep(50);
    }
    throw new AssertionError("the staging thread never reached " + AFTER);
  }
}
