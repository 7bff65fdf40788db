package dev.thaw.pool.cache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.CorruptChunkException;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.runtime.ChildJvm;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the host image cache against the real store: chunks verified on the way in and laid out contiguously
 * in restore order, shared by digest, evicted least recently used but never while pinned, a full cache and a
 * corrupt or missing chunk refused with typed errors that leave nothing behind.
 */
class HostImageCacheTest {

  private static final int CHUNK = 16 * 1024;
  private static final long KIB = 1024;

  @TempDir
  Path dir;
  private RocksChunkStore store;
  private HostImageCache cache;

  @BeforeEach
  void open() {
    store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")).setVerifyReads(false));
  }

  @AfterEach
  void close() {
    if (cache != null) {
      cache.close();
    }
    store.close();
  }

  private HostImageCache cache(long capacity) throws Exception {
    cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(capacity).setStagingThreads(3));
    return cache;
  }

  @Test
  void stagesVerifiedChunksBackToBackInFirstAccessOrder() throws Exception {
    ImageManifest m = TestImages.image(store, 1, CHUNK, List.of("a2", "a0"), 100 * KIB, 50 * KIB, 70 * KIB);
    cache(1 << 20);
    try (CacheLease lease = cache.stage("img", m, store)) {
      ChunkPlacement p = lease.placement();
      assertEquals(1, p.runs(), "one contiguous run: " + p);
      assertEquals(220 * KIB, lease.stagedBytes());
      List<Digest> expected = RestoreOrder.chunks(m);
      assertEquals(m.allocations().get(2).chunks().get(0).digest(), expected.get(0), "a2 first, as profiled");
      assertEquals(expected, p.entries().stream().map(ChunkPlacement.Entry::digest).toList());
      try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
          HostCacheView view = HostCacheView.attach(cache.path(), ctx)) {
        assertTrue(view.isReadOnly());
        PinnedChunks chunks = view.chunks(ChunkPlacement.fromBytes(p.toBytes()));
        for (Digest d : expected) {
          CachedChunk c = chunks.find(d).orElseThrow();
          byte[] bytes = new byte[c.length()];
          c.buffer().slice(c.offset(), c.length()).get(bytes);
          assertArrayEquals(TestImages.chunk(store, d), bytes, d.toString());
        }
        assertTrue(chunks.find(Digest.of(new byte[] {1})).isEmpty());
      }
    }
  }

  @Test
  void aWorkerProcessRestoresFromTheArenaReadOnlyInAFewCopies() throws Exception {
    // Packed: a0 and a1 are back to back on the device, so their copies coalesce too.
    ImageManifest m = TestImages.image(store, 13, CHUNK, List.of(), 256 * KIB, 128 * KIB);
    cache(1 << 20);
    try (CacheLease lease = cache.stage("img", m, store)) {
      Path manifest = Files.write(dir.resolve("manifest.json"), m.toBytes());
      Path placement = Files.write(dir.resolve("placement.bin"), lease.placement().toBytes());
      ChildJvm.Result child = ChildJvm.run(CacheWorkerChild.class, "sim", cache.path().toString(),
          manifest.toString(), placement.toString());
      assertEquals(0, child.exitCode(), child.output());
      assertEquals("true", child.get("readOnly"));
      assertEquals("refused", child.get("hostWrite"));
      assertEquals("1", child.get("slabs"), "a packed image maps as one slab");
      assertEquals("1", child.get("copies"), "one image, one run, one copy");
      assertEquals("match", child.get("deviceBytes"));
    }
  }

  @Test
  void sharesChunksAcrossImagesByDigest() throws Exception {
    ImageManifest a = TestImages.image(store, 2, CHUNK, List.of(), 64 * KIB, 32 * KIB);
    ImageManifest other = TestImages.image(store, 3, CHUNK, List.of(), 48 * KIB);
    // b = a's first allocation plus one of its own.
    ImageManifest.Allocation shared = a.allocations().get(0);
    ImageManifest.Allocation own = other.allocations().get(0);
    ImageManifest b = TestImages.manifest(List.of(shared,
        new ImageManifest.Allocation("own", shared.address() + (1 << 21), own.size(), own.chunks())), List.of(),
        shared.size() + own.size());
    cache(1 << 20);
    try (CacheLease la = cache.stage("a", a, store); CacheLease lb = cache.stage("b", b, store)) {
      assertEquals(48 * KIB, lb.stagedBytes(), "only the chunks a did not bring");
      Digest first = shared.chunks().get(0).digest();
      assertEquals(la.placement().find(first).offset(), lb.placement().find(first).offset());
      assertEquals(144 * KIB, cache.stats().usedBytes());
    }
  }

  @Test
  void evictsTheLeastRecentlyUsedImageFirst() throws Exception {
    ImageManifest a = TestImages.image(store, 4, CHUNK, List.of(), 96 * KIB);
    ImageManifest b = TestImages.image(store, 5, CHUNK, List.of(), 96 * KIB);
    ImageManifest c = TestImages.image(store, 6, CHUNK, List.of(), 96 * KIB);
    cache(200 * KIB);
    cache.stage("a", a, store).close();
    cache.stage("b", b, store).close();
    try (CacheLease again = cache.stage("a", a, store)) {
      assertEquals(0, again.stagedBytes(), "a is a hit");
    }
    cache.stage("c", c, store).close();
    assertTrue(cache.contains(first(a)), "a was used more recently than b");
    assertFalse(cache.contains(first(b)), "b was the least recently used");
    assertTrue(cache.contains(first(c)));
    assertEquals(96 * KIB, cache.stats().evictedBytes());
  }

  @Test
  void aLeaseOfAStagedImageHoldsUntilOneOfItsExtentsIsEvicted() throws Exception {
    ImageManifest a = TestImages.image(store, 4, CHUNK, List.of(), 96 * KIB);
    ImageManifest b = TestImages.image(store, 5, CHUNK, List.of(), 96 * KIB);
    cache(150 * KIB);
    assertNull(cache.lease("a", a), "never staged");
    ChunkPlacement staged;
    try (CacheLease first = cache.stage("a", a, store)) {
      staged = first.placement();
    }
    assertNull(cache.lease("a", TestImages.image(store, 4, CHUNK, List.of(), 96 * KIB)), "another manifest object");
    try (CacheLease fast = cache.lease("a", a)) {
      assertSame(staged, fast.placement(), "the stage's placement, no chunk looked up");
      assertSame(staged, cache.placement("a", a));
      // Pinned: staging b cannot evict a, and the cache says it is full.
      assertThrows(HostCacheFullException.class, () -> cache.stage("b", b, store));
    }
    cache.stage("b", b, store).close();
    assertNull(cache.lease("a", a), "a was evicted for b: its placement no longer holds");
    assertNull(cache.placement("a", a));
  }

  @Test
  void aLeaseOrPlacementOfAnEqualManifestReadAgainHitsWithoutStagingAndAnotherManifestMisses() throws Exception {
    ImageManifest a = TestImages.image(store, 4, CHUNK, List.of(), 96 * KIB);
    cache(256 * KIB);
    ChunkPlacement staged;
    try (CacheLease first = cache.stage("a", a, store)) {
      staged = first.placement();
    }
    long stagedBytes = cache.stats().stagedBytes();
    assertTrue(stagedBytes > 0, cache.stats().toString());

    // A registration reads the manifest from the store again: an equal object, not the staged one.
    ImageManifest again = ImageManifest.read(a.toBytes());
    assertEquals(a, again);
    assertTrue(a != again);
    assertSame(staged, cache.placement("a", again), "the stage's placement for an equal manifest");
    try (CacheLease hit = cache.lease("a", again)) {
      assertNotNull(hit, "an equal manifest leases the stage");
      assertSame(staged, hit.placement());
      assertEquals(0, hit.stagedBytes(), "nothing staged for it");
    }
    // The stage keeps the equal manifest from then on, and the first one is still equal to it.
    try (CacheLease stillA = cache.lease("a", a)) {
      assertNotNull(stillA);
      assertSame(staged, stillA.placement());
    }
    assertEquals(stagedBytes, cache.stats().stagedBytes(), "no byte staged again: " + cache.stats());

    // Another manifest under the same name (here another build of the same bytes) misses: it must be staged.
    ImageManifest rebuilt = TestImages.image(store, 4, CHUNK, List.of(), 96 * KIB);
    assertTrue(!rebuilt.equals(a), "another build's manifest differs (its build record)");
    assertNull(cache.lease("a", rebuilt), "another manifest");
    assertNull(cache.placement("a", rebuilt));
    ImageManifest other = TestImages.image(store, 6, CHUNK, List.of(), 64 * KIB);
    assertNull(cache.lease("a", other));
    assertNull(cache.placement("a", other));
    assertEquals(stagedBytes, cache.stats().stagedBytes(), cache.stats().toString());
    assertEquals(0, cache.stats().pinnedBytes(), "every lease given back: " + cache.stats());
  }

  @Test
  void neverEvictsWhatALeasePinsAndSaysWhenFull() throws Exception {
    ImageManifest a = TestImages.image(store, 7, CHUNK, List.of(), 96 * KIB);
    ImageManifest b = TestImages.image(store, 8, CHUNK, List.of(), 96 * KIB);
    cache(128 * KIB);
    CacheLease la = cache.stage("a", a, store);
    HostCacheFullException full = assertThrows(HostCacheFullException.class, () -> cache.stage("b", b, store));
    assertEquals(96 * KIB, full.needed());
    assertEquals(96 * KIB, full.pinned());
    assertTrue(full.getMessage().contains("'b'"), full.getMessage());
    assertTrue(cache.contains(first(a)), "the pinned image is intact");
    assertEquals(96 * KIB, cache.stats().usedBytes(), "the failed stage left nothing");
    la.close();
    try (CacheLease lb = cache.stage("b", b, store)) {
      assertFalse(cache.contains(first(a)), "unpinned, a made room for b");
      assertEquals(96 * KIB, lb.stagedBytes());
    }
    assertThrows(HostCacheFullException.class, () -> cache.stage("huge",
        TestImages.image(store, 9, CHUNK, List.of(), 200 * KIB), store), "larger than the whole cache");
  }

  @Test
  void refusesACorruptChunkNamesItAndNeverServesIt() throws Exception {
    cache(1 << 20);
    byte[] real = new byte[CHUNK];
    new Random(10).nextBytes(real);
    Digest named = Digest.of(real);
    byte[] damaged = real.clone();
    damaged[100] ^= 1;
    // A store that does not check writes takes damaged bytes under the real name: disk rot, a bad import.
    store.close();
    store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")).setVerifyWrites(false)
        .setVerifyReads(false));
    store.putChunk(named, ByteBuffer.wrap(damaged));
    ImageManifest good = TestImages.image(store, 11, CHUNK, List.of(), 64 * KIB);
    ImageManifest.Allocation a = good.allocations().get(0);
    ImageManifest bad = TestImages.manifest(List.of(a, new ImageManifest.Allocation("rotten", a.address() + (1 << 21),
        CHUNK, List.of(new ImageManifest.Chunk(named, 0, CHUNK)))), List.of(), a.size() + CHUNK);
    CorruptChunkException e = assertThrows(CorruptChunkException.class, () -> cache.stage("bad", bad, store));
    assertEquals(named, e.digest());
    assertTrue(e.getMessage().contains(named.toString()), e.getMessage());
    assertFalse(cache.contains(named), "a corrupt chunk is never served");
    assertFalse(cache.contains(first(good)), "nothing of the failed stage is visible");
    assertEquals(0, cache.stats().usedBytes());
    assertEquals(0, cache.stats().pinnedBytes());
    cache.stage("good", good, store).close();
    assertTrue(cache.contains(first(good)));
  }

  @Test
  void aMissingChunkIsNamedAndLeavesNothing() throws Exception {
    cache(1 << 20);
    ImageManifest good = TestImages.image(store, 12, CHUNK, List.of(), 32 * KIB);
    Digest absent = Digest.of(new byte[] {4, 2});
    ImageManifest.Allocation a = good.allocations().get(0);
    ImageManifest m = TestImages.manifest(List.of(a, new ImageManifest.Allocation("gone", a.address() + (1 << 21), 2,
        List.of(new ImageManifest.Chunk(absent, 0, 2)))), List.of(), a.size() + 2);
    ChunkNotFoundException e = assertThrows(ChunkNotFoundException.class, () -> cache.stage("m", m, store));
    assertTrue(e.getMessage().contains(absent.toString()), e.getMessage());
    assertEquals(0, cache.stats().usedBytes());
  }

  @Test
  void aNamedArenaFileIsRemovedOnClose() throws Exception {
    cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(1 << 20).setDirectory(dir));
    Path file = cache.path();
    assertTrue(Files.exists(file));
    cache.close();
    assertFalse(Files.exists(file));
    cache = null;
  }

  @Test
  void aPlacementRoundTripsAndRefusesGarbage() {
    Digest d = Digest.of(new byte[] {1, 2, 3});
    ChunkPlacement p = new ChunkPlacement("/proc/1/fd/3", List.of(new ChunkPlacement.Entry(d, 4096, 3)));
    ChunkPlacement back = ChunkPlacement.fromBytes(p.toBytes());
    assertEquals(p.entries(), back.entries());
    assertEquals("/proc/1/fd/3", back.arena());
    assertNotNull(back.find(d));
    byte[] cut = Arrays.copyOf(p.toBytes(), p.toBytes().length - 1);
    assertThrows(IllegalArgumentException.class, () -> ChunkPlacement.fromBytes(cut));
    assertThrows(IllegalArgumentException.class, () -> ChunkPlacement.fromBytes(new byte[] {1, 2, 3, 4}));
  }

  private static Digest first(ImageManifest m) {
    return m.allocations().get(0).chunks().get(0).digest();
  }
}
