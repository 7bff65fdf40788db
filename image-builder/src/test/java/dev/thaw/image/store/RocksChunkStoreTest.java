package dev.thaw.image.store;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.DBOptions;
import org.rocksdb.FlushOptions;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.Status;

/** Pins the {@link ChunkStore} contract on RocksDB: chunks, commits, GC, integrity, lifecycle. */
public class RocksChunkStoreTest {

  @TempDir Path dir;

  /** {@code n} random bytes from {@code seed}; for the archive's tests too. */
  public static byte[] random(long seed, int n) {
    byte[] b = new byte[n];
    new Random(seed).nextBytes(b);
    return b;
  }

  /** Stores {@code data} under its digest; for the archive's tests too. */
  public static Digest put(ChunkStore store, byte[] data) {
    Digest d = Digest.of(data);
    store.putChunk(d, ByteBuffer.wrap(data));
    return d;
  }

  private RocksChunkStore open() {
    return RocksChunkStore.open(dir.resolve("store"));
  }

  @Test
  void putsReadsAndDeduplicates() {
    try (RocksChunkStore s = open()) {
      byte[] big = random(1, 100_000); // a blob-file value
      byte[] small = random(2, 100); // an inline value
      Digest d = put(s, big);
      Digest e = put(s, small);
      assertTrue(s.contains(d));
      assertEquals(Optional.of(100_000), s.chunkSize(d));
      assertEquals(Optional.of(100), s.chunkSize(e));
      assertFalse(s.contains(Digest.of(new byte[1])));
      // Same chunk again, from a direct buffer this time: stored once.
      ByteBuffer direct = ByteBuffer.allocateDirect(big.length).put(big).flip();
      s.putChunk(d, direct);
      assertEquals(2, s.chunkCount());
      ByteBuffer out = ByteBuffer.allocate(100_000);
      assertEquals(100_000, s.readChunk(d, out));
      assertArrayEquals(big, out.array());
    }
  }

  @Test
  void directReadsFollowThePositionAndLimitContract() {
    try (RocksChunkStore s = open()) {
      byte[] data = random(3, 50_000);
      Digest d = put(s, data);
      s.putChunk(Digest.of(new byte[0]), ByteBuffer.allocate(0));

      ByteBuffer dst = ByteBuffer.allocateDirect(60_000);
      dst.position(1000).limit(55_000);
      assertEquals(50_000, s.readChunk(d, dst));
      assertEquals(51_000, dst.position(), "position advanced by the chunk's size");
      assertEquals(55_000, dst.limit(), "limit unchanged");
      byte[] got = new byte[50_000];
      dst.get(1000, got);
      assertArrayEquals(data, got);

      ByteBuffer tooSmall = ByteBuffer.allocateDirect(49_999);
      assertThrows(IllegalArgumentException.class, () -> s.readChunk(d, tooSmall));
      assertEquals(0, tooSmall.position());
      assertEquals(49_999, tooSmall.limit());

      ByteBuffer heap = ByteBuffer.allocate(50_010).position(10);
      s.readChunk(d, heap);
      assertEquals(50_010, heap.position());
      assertArrayEquals(data, Arrays.copyOfRange(heap.array(), 10, 50_010));

      assertEquals(0, s.readChunk(Digest.of(new byte[0]), ByteBuffer.allocateDirect(0)));
      Digest missing = Digest.of(new byte[] {1});
      assertEquals(missing, assertThrows(ChunkNotFoundException.class,
          () -> s.readChunk(missing, ByteBuffer.allocateDirect(10))).digest());
    }
  }

  @Test
  void commitIsAtomicAndNeedsEveryChunk() {
    try (RocksChunkStore s = open()) {
      Digest a = put(s, random(4, 10_000));
      Digest missing = Digest.of(random(5, 10));
      byte[] manifest = "{\"v\":1}".getBytes(StandardCharsets.UTF_8);
      ChunkNotFoundException e = assertThrows(ChunkNotFoundException.class,
          () -> s.commit("mlp:v1", manifest, Set.of(a, missing)));
      assertEquals(missing, e.digest());
      assertEquals(List.of(), s.tags());
      assertTrue(s.manifest("mlp:v1").isEmpty());

      s.commit("mlp:v1", manifest, Set.of(a));
      assertEquals(List.of("mlp:v1"), s.tags());
      assertArrayEquals(manifest, s.manifest("mlp:v1").orElseThrow());
      assertEquals(List.of(a), s.chunksOf("mlp:v1").orElseThrow());
    }
  }

  /** The refs entry keyed by a manifest's digest is GC's only source of reachability: it is written once. */
  @Test
  void aManifestIsNeverRecommittedWithAnotherChunkList() {
    try (RocksChunkStore s = open()) {
      Digest a = put(s, random(6, 10_000));
      Digest b = put(s, random(7, 10_000));
      byte[] manifest = "{\"v\":2}".getBytes(StandardCharsets.UTF_8);
      s.commit("first", manifest, Set.of(a, b));
      for (Set<Digest> other : List.of(Set.<Digest>of(), Set.of(a))) {
        StoreException e = assertThrows(StoreException.class, () -> s.commit("second", manifest, other));
        assertTrue(e.getMessage().contains("already committed with another chunk list"), e.getMessage());
      }
      assertEquals(List.of("first"), s.tags());
      assertEquals(List.of(a, b).stream().sorted().toList(), s.chunksOf("first").orElseThrow());
      assertEquals(0, s.collectGarbage().chunks());
      s.commit("second", manifest, Set.of(b, a)); // the same set: a second tag for the same image
      assertEquals(List.of("first", "second"), s.tags());
    }
  }

  @Test
  void gcKeepsChunksOtherTagsUseAndDeletesTheRest() throws Exception {
    Digest c1;
    Digest c2;
    Digest c3;
    Digest orphan;
    try (RocksChunkStore s = open()) {
      c1 = put(s, random(11, 20_000));
      c2 = put(s, random(12, 20_000));
      c3 = put(s, random(13, 3_000));
      orphan = put(s, random(14, 20_000));
      s.commit("a", "A".getBytes(StandardCharsets.UTF_8), Set.of(c1, c2));
      s.commit("b", "B".getBytes(StandardCharsets.UTF_8), Set.of(c2, c3));
      s.commit("b-alias", "B".getBytes(StandardCharsets.UTF_8), Set.of(c2, c3));
      assertTrue(s.delete("a"));
      assertFalse(s.delete("a"));
      assertTrue(s.delete("b-alias"));
      assertArrayEquals("B".getBytes(StandardCharsets.UTF_8), s.manifest("b").orElseThrow(),
          "a manifest shared with a deleted tag stays");
    }
    try (RocksChunkStore s = open()) { // a fresh process: no pending chunks
      long before = packBytes(dir.resolve("store"));
      ChunkStore.GarbageCollection gc = s.collectGarbage();
      assertEquals(new ChunkStore.GarbageCollection(2, 40_000, before - packBytes(dir.resolve("store"))), gc,
          "what the packs shrank by is what gc says it freed on disk");
      assertTrue(gc.diskBytes() > 0, "the pack was rewritten without the dead chunks: " + gc);
      assertFalse(s.contains(c1));
      assertFalse(s.contains(orphan));
      assertTrue(s.contains(c2));
      assertTrue(s.contains(c3));
      ByteBuffer dst = ByteBuffer.allocateDirect(20_000);
      s.readChunk(c2, dst);
      assertEquals(new ChunkStore.GarbageCollection(0, 0, 0), s.collectGarbage());
      assertEquals(List.of(), s.verify());
    }
  }

  @Test
  void gcSparesChunksOfABuildInFlight() {
    try (RocksChunkStore s = open()) {
      Digest old = put(s, random(20, 20_000));
      s.commit("old", "O".getBytes(StandardCharsets.UTF_8), Set.of(old));
      // A build begins: one new chunk, one that dedups against the old image.
      Digest fresh = put(s, random(21, 20_000));
      put(s, random(20, 20_000));
      assertTrue(s.delete("old"));
      assertEquals(new ChunkStore.GarbageCollection(0, 0, 0), s.collectGarbage());
      s.commit("new", "N".getBytes(StandardCharsets.UTF_8), Set.of(fresh, old));
      assertEquals(0, s.pendingChunks());
      assertEquals(List.of(), s.verify());
      s.delete("new");
      assertEquals(2, s.collectGarbage().chunks());
    }
  }

  @Test
  void recommittingATagReplacesItsManifest() {
    try (RocksChunkStore s = open()) {
      Digest a = put(s, random(30, 5000));
      Digest b = put(s, random(31, 5000));
      s.commit("t", "1".getBytes(StandardCharsets.UTF_8), Set.of(a));
      s.commit("t", "2".getBytes(StandardCharsets.UTF_8), Set.of(b));
      assertArrayEquals("2".getBytes(StandardCharsets.UTF_8), s.manifest("t").orElseThrow());
      s.releasePending();
      assertEquals(5000, s.collectGarbage().bytes());
      assertTrue(s.contains(b));
    }
  }

  @Test
  void aCorruptChunkIsFoundByVerifyAndNamedByAVerifyingRead() throws Exception {
    byte[] data = random(40, 30_000);
    Digest d;
    Digest good;
    try (RocksChunkStore s = open()) {
      d = put(s, data);
      good = put(s, random(41, 30_000));
      s.commit("t", new byte[] {1}, Set.of(d, good));
    }
    flipOnDisk(dir.resolve("store"), data, 12_345);

    try (RocksChunkStore s = open()) {
      assertEquals(List.of(d), s.verify());
      ChunkHashMismatchException e = assertThrows(ChunkHashMismatchException.class,
          () -> s.readChunk(d, ByteBuffer.allocateDirect(30_000)));
      assertEquals(d, e.digest());
      assertTrue(e.getMessage().contains(d.toString()));
      s.readChunk(good, ByteBuffer.allocateDirect(30_000));
      // For a caller that hashes the bytes itself (restores, the host cache): read once, hashed once, by the caller.
      ByteBuffer unchecked = ByteBuffer.allocateDirect(30_000);
      assertEquals(30_000, s.readChunkUnchecked(d, unchecked));
      assertEquals(30_000, unchecked.position());
      assertEquals(data[12_345] ^ 0x01, unchecked.get(12_345));
    }
    try (RocksChunkStore s = RocksChunkStore.open(
        new StoreOptions().setPath(dir.resolve("store")).setVerifyReads(false))) {
      ByteBuffer dst = ByteBuffer.allocateDirect(30_000);
      s.readChunk(d, dst); // unverified: the damage goes unnoticed, which is why verifying is the default
      assertEquals(data[12_345] ^ 0x01, dst.get(12_345));
    }
  }

  /** Flips one bit of a chunk's bytes where they lie in the store's files, as a failing disk would. */
  static void flipOnDisk(Path store, byte[] chunk, int at) throws Exception {
    List<Path> files;
    try (var walk = Files.walk(store)) {
      files = walk.filter(Files::isRegularFile).toList();
    }
    for (Path f : files) {
      byte[] all = Files.readAllBytes(f);
      for (int i = 0; i + chunk.length <= all.length; i++) {
        if (all[i] == chunk[0] && Arrays.equals(all, i, i + chunk.length, chunk, 0, chunk.length)) {
          all[i + at] ^= 0x01;
          Files.write(f, all);
          return;
        }
      }
    }
    throw new AssertionError("the chunk is in no file of " + store);
  }

  /**
   * A store as Thaw wrote it before pack files (schema 1): chunk bytes in the {@code chunks} family's blob
   * files, written here through RocksDB with that layout.
   */
  static void writeSchema1Store(Path path, String tag, byte[] manifest, List<byte[]> chunks) throws Exception {
    List<ColumnFamilyDescriptor> cfs = new ArrayList<>();
    cfs.add(new ColumnFamilyDescriptor(RocksDB.DEFAULT_COLUMN_FAMILY));
    ColumnFamilyOptions blobs = new ColumnFamilyOptions().setEnableBlobFiles(true)
        .setMinBlobSize(4096);
    cfs.add(new ColumnFamilyDescriptor(RocksChunkStore.CF_CHUNKS.getBytes(StandardCharsets.UTF_8), blobs));
    for (String name : List.of(RocksChunkStore.CF_CHUNK_SIZES, RocksChunkStore.CF_MANIFESTS, RocksChunkStore.CF_REFS,
        RocksChunkStore.CF_TAGS, RocksChunkStore.CF_META)) {
      cfs.add(new ColumnFamilyDescriptor(name.getBytes(StandardCharsets.UTF_8)));
    }
    List<ColumnFamilyHandle> h = new ArrayList<>();
    TreeSet<Digest> sorted = new TreeSet<>();
    try (DBOptions o = new DBOptions().setCreateIfMissing(true).setCreateMissingColumnFamilies(true);
        RocksDB db = RocksDB.open(o, path.toString(), cfs, h)) {
      for (byte[] c : chunks) {
        Digest d = Digest.of(c);
        sorted.add(d);
        db.put(h.get(1), d.toBytes(), c);
        db.put(h.get(2), d.toBytes(), ByteBuffer.allocate(4).putInt(c.length).array());
      }
      ByteBuffer refs = ByteBuffer.allocate(32 * sorted.size());
      sorted.forEach(d -> refs.put(d.toBytes()));
      byte[] md = Digest.of(manifest).toBytes();
      db.put(h.get(3), md, manifest);
      db.put(h.get(4), md, refs.array());
      db.put(h.get(5), tag.getBytes(StandardCharsets.UTF_8), md);
      db.put(h.get(6), "schema-version".getBytes(StandardCharsets.UTF_8), ByteBuffer.allocate(4).putInt(1).array());
      try (FlushOptions f = new FlushOptions().setWaitForFlush(true)) {
        db.flush(f, h);
      }
      h.forEach(ColumnFamilyHandle::close);
    }
    blobs.close();
  }

  /** Stores written before pack files stay readable, and become pack stores at their first writable open. */
  @Test
  void aSchema1StoreIsReadAsItIsAndTakesNewChunksInPacks() throws Exception {
    Path store = dir.resolve("old");
    byte[] a = random(70, 50_000);
    byte[] b = random(71, 60_000);
    byte[] manifest = "{\"old\": 1}".getBytes(StandardCharsets.UTF_8);
    writeSchema1Store(store, "old:v1", manifest, List.of(a, b));
    assertTrue(Files.list(store).anyMatch(f -> f.toString().endsWith(".blob")), "blob files written");

    try (RocksChunkStore ro = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      assertEquals(List.of("old:v1"), ro.tags());
      ByteBuffer dst = ByteBuffer.allocateDirect(60_000);
      assertEquals(50_000, ro.readChunk(Digest.of(a), dst));
      assertEquals(List.of(), ro.verify());
    }
    Digest c;
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setCreate(false))) {
      c = put(s, random(72, 70_000));
      s.commit("new:v1", "{\"new\": 1}".getBytes(StandardCharsets.UTF_8), Set.of(Digest.of(a), c));
      assertEquals(List.of(), s.verify());
      ByteBuffer dst = ByteBuffer.allocate(70_000);
      assertEquals(60_000, s.readChunk(Digest.of(b), dst));
      assertTrue(s.delete("old:v1"));
      assertEquals(new ChunkStore.GarbageCollection(1, 60_000, 60_000), s.collectGarbage(),
          "the schema-1 chunk b goes, its bytes with it");
      assertEquals(List.of(), s.verify());
    }
    assertTrue(Files.list(store.resolve("packs")).count() >= 1, "the new chunk went to a pack");
    try (RocksChunkStore ro = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      assertEquals(List.of("new:v1"), ro.tags());
      ro.readChunk(c, ByteBuffer.allocateDirect(70_000));
      ro.readChunk(Digest.of(a), ByteBuffer.allocateDirect(70_000));
    }
  }

  /** Many threads appending (to several packs at once) while another syncs: every chunk is indexed and whole. */
  @Test
  void concurrentPutsAndSyncsLoseNothing() throws Exception {
    Path store = dir.resolve("concurrent");
    Set<Digest> all = ConcurrentHashMap.newKeySet();
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setPackFileSize(300_000))) {
      AtomicBoolean done = new AtomicBoolean();
      Thread syncer = new Thread(() -> {
        while (!done.get()) {
          s.sync();
        }
      });
      syncer.start();
      List<Thread> writers = new ArrayList<>();
      for (int t = 0; t < 8; t++) {
        int seed = t;
        Thread w = new Thread(() -> {
          for (int i = 0; i < 60; i++) {
            byte[] b = random(1000 * seed + i, 5_000 + (i * 997) % 15_000);
            all.add(put(s, b));
            put(s, random(7, 3_000)); // the same chunk from every thread: stored once
          }
        });
        writers.add(w);
        w.start();
      }
      for (Thread w : writers) {
        w.join();
      }
      done.set(true);
      syncer.join();
      all.add(Digest.of(random(7, 3_000)));
      s.commit("all", "m".getBytes(StandardCharsets.UTF_8), all);
      assertEquals(all.size(), s.chunkCount());
    }
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      assertEquals(all.size(), s.chunkCount());
      assertEquals(List.of(), s.verify());
      for (Digest d : all) {
        s.readChunk(d, ByteBuffer.allocateDirect(20_000));
      }
    }
  }

  /** GC gives disk space back a pack at a time: empty packs are deleted, sparse ones rewritten. */
  @Test
  void gcDeletesEmptyPacksAndCompactsSparseOnes() throws Exception {
    Path store = dir.resolve("packs-store");
    StoreOptions small = new StoreOptions().setPath(store).setPackFileSize(130_000);
    List<Digest> keep = new ArrayList<>();
    List<Digest> drop = new ArrayList<>();
    try (RocksChunkStore s = RocksChunkStore.open(small)) {
      for (int i = 0; i < 12; i++) { // 12 x 40 KB in packs of at most 130 KB: 3 chunks each, 4 packs
        (i % 4 == 0 ? keep : drop).add(put(s, random(100 + i, 40_000)));
      }
      s.commit("keep", "k".getBytes(StandardCharsets.UTF_8), Set.copyOf(keep));
      s.commit("drop", "d".getBytes(StandardCharsets.UTF_8), Set.copyOf(drop));
    }
    assertEquals(4, packFiles(store));
    try (RocksChunkStore s = RocksChunkStore.open(small)) {
      assertTrue(s.delete("drop"));
      long before = packBytes(store);
      ChunkStore.GarbageCollection gc = s.collectGarbage();
      assertEquals(new ChunkStore.GarbageCollection(9, 360_000, before - packBytes(store)), gc);
      assertTrue(gc.diskBytes() >= 360_000, "every dead chunk's bytes given back: " + gc);
      // Packs 0-2 each keep one chunk of three (a third live): their chunks move to one new pack and they go;
      // pack 3 keeps nothing and goes.
      assertEquals(List.of(), s.verify());
      for (Digest d : keep) {
        s.readChunk(d, ByteBuffer.allocateDirect(40_000));
      }
    }
    assertEquals(1, packFiles(store), "the kept chunks now fill one pack");
    try (RocksChunkStore s = RocksChunkStore.open(small)) {
      for (Digest d : keep) {
        s.readChunk(d, ByteBuffer.allocateDirect(40_000));
      }
      assertTrue(s.delete("keep"));
      assertEquals(3, s.collectGarbage().chunks());
    }
    assertEquals(0, packFiles(store), "an empty store keeps no pack");
  }

  /** The bytes of the store's pack files. */
  static long packBytes(Path store) throws Exception {
    if (!Files.isDirectory(store.resolve("packs"))) {
      return 0;
    }
    try (var list = Files.list(store.resolve("packs"))) {
      long sum = 0;
      for (Path p : list.toList()) {
        sum += Files.size(p);
      }
      return sum;
    }
  }

  private static long packFiles(Path store) throws Exception {
    if (!Files.isDirectory(store.resolve("packs"))) {
      return 0;
    }
    try (var list = Files.list(store.resolve("packs"))) {
      return list.count();
    }
  }

  @Test
  void invalidTagsAreRefusedNamingTheRule() {
    try (RocksChunkStore s = open()) {
      for (String bad : new String[] {"", "Mlp", "../etc", "a/b", "mlp:", ":v1", "a..b", "x".repeat(129),
          "mlp:v1:v2", " mlp", "-mlp"}) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> s.commit(bad, new byte[0], Set.of()), bad);
        assertTrue(e.getMessage().contains("is not a tag: a tag"), e.getMessage());
      }
      for (String ok : new String[] {"mlp", "gpt2:v1.0", "gpt2-small_fp16:2026-11-21", "x".repeat(128)}) {
        s.commit(ok, new byte[0], Set.of());
      }
      assertEquals(4, s.tags().size());
    }
  }

  @Test
  void closeIsIdempotentAndUseAfterCloseFails() {
    RocksChunkStore s = open();
    s.close();
    s.close();
    assertThrows(IllegalStateException.class, () -> s.contains(Digest.of(new byte[0])));
    try (RocksChunkStore again = open()) {
      assertEquals(List.of(), again.tags());
    }
  }

  @Test
  void openingTheSameStoreTwiceInOneProcessIsALockError() {
    try (RocksChunkStore s = open()) {
      StoreLockedException e = assertThrows(StoreLockedException.class, this::open);
      assertTrue(e.getMessage().contains("in use by another process"));
      assertTrue(e.getMessage().contains(dir.resolve("store").toString()));
    }
  }

  @Test
  void readOnlyOpenOfNoStoreFailsClearlyAndWritesAreRefused() {
    Path none = dir.resolve("none");
    StoreException e = assertThrows(StoreException.class,
        () -> RocksChunkStore.open(new StoreOptions().setPath(none).setReadOnly(true)));
    assertTrue(e.getMessage().contains(none.toString()));
    try (RocksChunkStore s = open()) {
      put(s, random(50, 100));
    }
    try (RocksChunkStore ro = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")).setReadOnly(true))) {
      assertEquals(1, ro.chunkCount());
      assertThrows(StoreException.class, () -> put(ro, random(51, 100)));
    }
  }

  @Test
  void anUnwritableDirectoryIsAStoreErrorNamingThePath() throws Exception {
    Path file = dir.resolve("a-file");
    Files.writeString(file, "x");
    StoreException e = assertThrows(StoreException.class, () -> RocksChunkStore.open(file.resolve("store")));
    assertTrue(e.getMessage().contains(file.resolve("store").toString()), e.getMessage());
  }

  /**
   * With CURRENT gone, the first open failed and the second created an empty store over the old one, deleting
   * every table and blob file: a damaged store must fail to open, naming the damage, however often it is tried.
   */
  @Test
  void aDamagedStoreFailsToOpenNamingTheDamageAndNothingIsChanged() throws Exception {
    Path store = dir.resolve("store");
    try (RocksChunkStore s = open()) {
      s.commit("t", new byte[] {1}, Set.of(put(s, random(60, 50_000))));
      s.flush();
    }
    Files.delete(store.resolve("CURRENT"));
    Map<String, Long> before = files(store);
    for (StoreOptions o : List.of(new StoreOptions().setPath(store), new StoreOptions().setPath(store),
        new StoreOptions().setPath(store).setReadOnly(true), new StoreOptions().setPath(store).setCreate(true))) {
      StoreException e = assertThrows(StoreException.class, () -> RocksChunkStore.open(o));
      assertTrue(e.getMessage().contains("is damaged") && e.getMessage().contains("CURRENT"), e.getMessage());
      assertEquals(before, files(store), "a failed open changes nothing");
    }
  }

  @Test
  void onlyACreatingOpenMakesANewStore() {
    Path none = dir.resolve("none");
    StoreException e = assertThrows(StoreException.class,
        () -> RocksChunkStore.open(new StoreOptions().setPath(none).setCreate(false)));
    assertTrue(e.getMessage().contains("there is no store here"), e.getMessage());
    assertFalse(Files.exists(none));
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(none).setCreate(true))) {
      assertEquals(List.of(), s.tags());
    }
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(none).setCreate(false))) {
      assertEquals(List.of(), s.tags());
    }
  }

  /** Every file of a store directory with its size and modification time. */
  static Map<String, Long> files(Path store) throws Exception {
    Map<String, Long> out = new TreeMap<>();
    try (var list = Files.list(store)) {
      for (Path f : list.toList()) {
        out.put(f.getFileName().toString(), Files.size(f) * 31
            + Files.getLastModifiedTime(f).toMillis());
      }
    }
    return out;
  }

  @Test
  void optionsComeFromTheEnvironment() {
    assertEquals(StoreOptions.DEFAULT_PATH, StoreOptions.fromEnvironment(Map.of()).path());
    assertEquals(Path.of("/srv/thaw"), StoreOptions.fromEnvironment(Map.of("THAW_STORE", "/srv/thaw")).path());
    assertTrue(new StoreOptions().toJson().get("verifyReads").asBoolean());
  }

  @Test
  void aReadOnlyOpenTriesAgainWhenAFileItListedVanishedAndOnlyThen() {
    RocksDBException gone = new RocksDBException("while stat a file for size: /s/000004.log: No such file or directory",
        new Status(Status.Code.IOError, Status.SubCode.Undefined, null));
    int[] calls = {0};
    String opened = RocksChunkStore.openBesideWriter(() -> {
      if (++calls[0] < 3) {
        throw new StoreException(dir, "cannot open: " + gone.getMessage(), "IOError", gone);
      }
      return "open";
    });
    assertEquals("open", opened);
    assertEquals(3, calls[0]);

    calls[0] = 0;
    StoreException always = assertThrows(StoreException.class, () -> RocksChunkStore.openBesideWriter(() -> {
      calls[0]++;
      throw new StoreException(dir, "cannot open: " + gone.getMessage(), "IOError", gone);
    }));
    assertEquals(RocksChunkStore.READ_ONLY_OPEN_ATTEMPTS, calls[0], always.getMessage());

    // A table file compacted away between the manifest read and its open: RocksDB says Corruption.
    RocksDBException compacted = new RocksDBException("Corruption: IO error: No such file or directory: While open a "
        + "file for random read: /s/000330.sst: No such file or directory",
        new Status(Status.Code.Corruption, Status.SubCode.Undefined, null));
    calls[0] = 0;
    assertEquals("open", RocksChunkStore.openBesideWriter(() -> {
      if (++calls[0] < 2) {
        throw new StoreException(dir, "is damaged: " + compacted.getMessage(), "Corruption", compacted);
      }
      return "open";
    }));
    assertEquals(2, calls[0]);

    calls[0] = 0;
    assertThrows(StoreException.class, () -> RocksChunkStore.openBesideWriter(() -> {
      calls[0]++;
      throw new StoreException(dir, "there is no store here");
    }));
    assertEquals(1, calls[0], "any other failure at once");
    RocksDBException damaged = new RocksDBException("Corruption: block checksum mismatch",
        new Status(Status.Code.Corruption, Status.SubCode.Undefined, null));
    calls[0] = 0;
    assertThrows(StoreException.class, () -> RocksChunkStore.openBesideWriter(() -> {
      calls[0]++;
      throw new StoreException(dir, "is damaged: " + damaged.getMessage(), "Corruption", damaged);
    }));
    assertEquals(1, calls[0], "a damaged store at once");
  }
}
