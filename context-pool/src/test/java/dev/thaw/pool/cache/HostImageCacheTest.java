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
    cache = HostImageCache.create(new HostCacheOptions().capacityBytes(capacity).stagingThreads(3));
    return cache;
  }

  @Test
  void stagesVerifiedChunksBackToBackInFirstAccessOrder() throws Exception {
    ImageManifest m = TestImages.image(store, 1, CHUNK, List.of("a2", "a0"), 100 * KIB, 50 * KIB, 70 * KIB);
    cache(1 << 20);
    try (CacheLease lease = cache.stage("img", m, store)) {
      ChunkPlacement p = lease.placement();
      for (int i = 1; i < p.entries().size(); i++) {
        ChunkPlacement.Entry e = p.entries().get(i - 1);
        assertEquals(e.offset() + e.length(), p.entries().get(i).offset(), "back to back in the arena: " + p);
      }
      assertEquals(2, p.runs(), "a2 alone, then a0 and a1, which follow each other on the device: " + p);
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
    cache = HostImageCache.create(new HostCacheOptions().capacityBytes(1 << 20).stagingThreads(3)
        .layout(HostCacheOptions.Layout.SHARED));
    try (CacheLease la = cache.stage("a", a, store); CacheLease lb = cache.stage("b", b, store)) {
      assertEquals(48 * KIB, lb.stagedBytes(), "only the chunks a did not bring");
      Digest first = shared.chunks().get(0).digest();
      assertEquals(la.placement().find(first).offset(), lb.placement().find(first).offset());
      assertEquals(144 * KIB, cache.stats().usedBytes());
    }
  }

  /** An allocation at {@code address} made of {@code chunks}, each stored. */
  private ImageManifest.Allocation allocation(String name, long address, byte[]... chunks) {
    List<ImageManifest.Chunk> list = new java.util.ArrayList<>();
    long offset = 0;
    for (byte[] c : chunks) {
      Digest d = Digest.of(c);
      store.putChunk(d, ByteBuffer.wrap(c));
      list.add(new ImageManifest.Chunk(d, offset, c.length));
      offset += c.length;
    }
    return new ImageManifest.Allocation(name, address, offset, list);
  }

  private static byte[] random(long seed, int bytes) {
    byte[] b = new byte[bytes];
    new Random(seed).nextBytes(b);
    return b;
  }

  /**
   * Weights with zeroed biases between them, back to back on the device (GPT-2's shape): one bias chunk used three
   * times. {@code SHARED} holds it once, so its second and third uses each break the image's one run of the device
   * in two; {@code RUNS} holds each use in its place (read once, copied twice), and the image is one run, which a
   * second stage finds whole and shares.
   */
  @Test
  void theRunsLayoutHoldsEachUseOfARepeatedChunkInItsPlace() throws Exception {
    byte[] zeros = new byte[4096];
    long at = TestImages.BASE;
    List<ImageManifest.Allocation> allocations = new java.util.ArrayList<>();
    for (int i = 0; i < 3; i++) {
      allocations.add(allocation("w" + i, at, random(30 + i, CHUNK), random(40 + i, CHUNK)));
      at += 2 * CHUNK;
      allocations.add(allocation("b" + i, at, zeros));
      at += zeros.length;
    }
    ImageManifest m = TestImages.manifest(allocations, List.of(), at - TestImages.BASE);
    long distinct = 6L * CHUNK + zeros.length;
    try (HostImageCache shared = HostImageCache.create(new HostCacheOptions().capacityBytes(1 << 20)
        .layout(HostCacheOptions.Layout.SHARED)); CacheLease lease = shared.stage("img", m, store)) {
      assertEquals(4, lease.placement().runs(), "w0 b0 w1 | b1 | w2 | b2: " + lease.placement());
      assertEquals(distinct, lease.placement().arenaBytes());
    }
    cache(1 << 20);
    try (CacheLease lease = cache.stage("img", m, store)) {
      ChunkPlacement p = lease.placement();
      assertEquals(1, p.runs(), "one run, as on the device: " + p);
      assertEquals(distinct, lease.stagedBytes(), "each chunk read from the store once");
      assertEquals(2L * zeros.length, cache.stats().heldAgainBytes(), "the bias's second and third uses");
      assertEquals(distinct + 2L * zeros.length, p.arenaBytes());
      try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
          HostCacheView view = HostCacheView.attach(cache.path(), ctx)) {
        PinnedChunks chunks = view.chunks(ChunkPlacement.fromBytes(p.toBytes()));
        java.util.Set<Long> places = new java.util.HashSet<>();
        for (ImageManifest.Allocation a : m.allocations()) {
          for (ImageManifest.Chunk c : a.chunks()) {
            CachedChunk cc = chunks.find(a.address() + c.offset(), c.digest()).orElseThrow();
            assertTrue(places.add(cc.offset()), "a place of its own for each use");
            byte[] bytes = new byte[c.length()];
            cc.buffer().slice(cc.offset(), c.length()).get(bytes);
            assertArrayEquals(TestImages.chunk(store, c.digest()), bytes, a.name());
          }
        }
        assertEquals(1, CoalescedCopies.plan(RestoreOrder.allocations(m), chunks).size(), "a whole restore: one copy");
      }
      long used = cache.stats().usedBytes();
      try (CacheLease again = cache.stage("img", m, store)) {
        assertEquals(0, again.stagedBytes());
        assertEquals(p.entries(), again.placement().entries(), "the first stage's places, found whole");
        assertEquals(used, cache.stats().usedBytes());
        assertEquals(2L * zeros.length, cache.stats().heldAgainBytes());
      }
    }
  }

  /**
   * Another image's chunks are shared where sharing breaks no run of this image (the shared run is a whole run of its
   * device) or where the shared run is long enough to copy at full speed on its own; a short run that this image
   * continues on the device is held again, copied from the arena (not read from the store).
   */
  @Test
  void theRunsLayoutSharesAnotherImagesRunsWhereTheyBreakNothingOrAreLong() throws Exception {
    cache(16 << 20);
    ImageManifest a = TestImages.image(store, 21, CHUNK, List.of(), 64 * KIB);
    ImageManifest.Allocation s = a.allocations().get(0);
    int big = (int) HostCacheOptions.Layout.SHARED_RUN_BYTES / 8;
    ImageManifest.Allocation longRun = allocation("long", TestImages.BASE + (1L << 30), random(50, big),
        random(51, big), random(52, big), random(53, big), random(54, big), random(55, big), random(56, big),
        random(57, big));
    ImageManifest l = TestImages.manifest(List.of(longRun), List.of(), longRun.size());
    long b = TestImages.BASE + (2L << 30);
    try (CacheLease la = cache.stage("a", a, store); CacheLease ll = cache.stage("l", l, store)) {
      long before = cache.stats().heldAgainBytes();
      ImageManifest continued = TestImages.manifest(List.of(new ImageManifest.Allocation("s", b, s.size(), s.chunks()),
          allocation("own", b + s.size(), random(60, CHUNK))), List.of(), s.size() + CHUNK);
      try (CacheLease lc = cache.stage("continued", continued, store)) {
        assertEquals(CHUNK, lc.stagedBytes(), "only its own chunk read");
        assertEquals(before + s.size(), cache.stats().heldAgainBytes(), "s held again, in this image's run");
        assertEquals(1, lc.placement().runs());
      }
      before = cache.stats().heldAgainBytes();
      long c = b + (64L << 20);
      ImageManifest apart = TestImages.manifest(List.of(new ImageManifest.Allocation("s", c, s.size(), s.chunks()),
          allocation("own", c + (4L << 20), random(61, CHUNK))), List.of(), s.size() + CHUNK);
      try (CacheLease lp = cache.stage("apart", apart, store)) {
        assertEquals(before, cache.stats().heldAgainBytes(), "s is a run of its own on the device: shared");
        assertEquals(la.placement().find(s.chunks().get(0).digest()).offset(),
            lp.placement().find(s.chunks().get(0).digest()).offset());
      }
      before = cache.stats().heldAgainBytes();
      ImageManifest longer = TestImages.manifest(List.of(
          new ImageManifest.Allocation("long", b, longRun.size(), longRun.chunks()),
          allocation("own", b + longRun.size(), random(62, CHUNK))), List.of(), longRun.size() + CHUNK);
      try (CacheLease lo = cache.stage("longer", longer, store)) {
        assertEquals(before, cache.stats().heldAgainBytes(), "a run of 4 MiB copies at full speed alone: shared");
        assertEquals(CHUNK, lo.stagedBytes());
        assertEquals(2, lo.placement().runs(), "the shared run, then this image's own chunk");
      }
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
    cache = HostImageCache.create(new HostCacheOptions().capacityBytes(1 << 20).directory(dir));
    Path file = cache.path();
    assertTrue(Files.exists(file));
    cache.close();
    assertFalse(Files.exists(file));
    cache = null;
  }

  @Test
  void aPlacementRoundTripsAndRefusesGarbage() {
    Digest d = Digest.of(new byte[] {1, 2, 3});
    Digest e = Digest.of(new byte[] {4});
    // A cubin (no device address), then one chunk used at two device addresses, each with its own place.
    ChunkPlacement p = new ChunkPlacement("/proc/1/fd/3", List.of(new ChunkPlacement.Entry(e, 0, 1),
        new ChunkPlacement.Entry(d, 4096, 3, 0x7f0000000000L), new ChunkPlacement.Entry(d, 8192, 3, 0x7f0000000100L)));
    ChunkPlacement back = ChunkPlacement.fromBytes(p.toBytes());
    assertEquals(p.entries(), back.entries());
    assertEquals("/proc/1/fd/3", back.arena());
    assertEquals(4096, back.find(d).offset(), "by digest: the first use's place");
    assertEquals(8192, back.find(0x7f0000000100L, d).offset(), "by use: its own place");
    assertNull(back.find(0x7f0000000100L, e), "another chunk at that address: no answer by use");
    assertNull(back.find(0x7f0000000200L, d));
    assertEquals(ChunkPlacement.NO_DEVICE, back.find(e).device());
    assertEquals(3, back.bytes() - 1, "distinct chunks");
    assertEquals(7, back.arenaBytes(), "places named");
    byte[] cut = java.util.Arrays.copyOf(p.toBytes(), p.toBytes().length - 1);
    assertThrows(IllegalArgumentException.class, () -> ChunkPlacement.fromBytes(cut));
    assertThrows(IllegalArgumentException.class, () -> ChunkPlacement.fromBytes(new byte[] {1, 2, 3, 4}));
  }

  private static Digest first(ImageManifest m) {
    return m.allocations().get(0).chunks().get(0).digest();
  }
}
