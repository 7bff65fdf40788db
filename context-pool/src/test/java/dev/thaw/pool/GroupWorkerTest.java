package dev.thaw.pool;

import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.LlamaCheckpoint;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.LlamaConfig.Architecture;
import dev.thaw.examples.llama.LlamaRankFunction;
import dev.thaw.examples.llama.LlamaTensorParallel;
import dev.thaw.examples.llama.SeededLlamaWeights;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.GroupImageBuilder;
import dev.thaw.image.GroupImage;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.runtime.function.GroupFunction;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins a pooled worker becoming a tensor-parallel group (BECOME_GROUP) with real worker processes on three simulated
 * devices (the pool's on 0 and 1), the real store and the host cache: a worker becomes a TP2 group from the host
 * cache, prepared by the pool and not, and answers the split's ids either way; a group prepared for other devices
 * than the BECOME names goes whole and still answers right; a BECOME_GROUP that cannot be served is refused naming
 * why, at once in the parent where it can tell, and the worker ends cleanly when released; a group's worker is never
 * recycled and leaves no host-cache pin behind; a rank whose bytes are corrupt in the store fails the start naming
 * that rank, and the worker ends instead of hanging.
 */
class GroupWorkerTest {

  /** Splits two ways: heads, key-value heads and the MLP divide by 2. */
  private static final LlamaConfig TINY = new LlamaConfig("tp-pool-tiny", Architecture.LLAMA, 64, 2, 4, 4, 32, 128,
      97, 64, 1e-5f, 10000, null, false, false, 0, HalfType.BF16);
  private static final int[][] PROMPTS = {{3, 14, 15, 92, 65, 35, 89}, {26, 43, 38}};
  private static final int NEW_TOKENS = 4;
  private static final String TAG = "tiny-tp:1";
  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir static Path built;
  private static Path storePath;
  /** The never-imaged split's new ids for {@link #PROMPTS}. */
  private static JsonNode expected;
  private static byte[] request;

  @TempDir Path dir;

  @BeforeAll
  static void build() throws Exception {
    storePath = built.resolve("store");
    int[] devices = {0, 1};
    SeededLlamaWeights weights = new SeededLlamaWeights(TINY, 11);
    Path folder = built.resolve("ckpt");
    LlamaCheckpoint.save(weights, folder, 1);
    ObjectNode config = JSON.createObjectNode().put("path", folder.toString()).put("maxBatch", 2).put("maxTokens", 32);
    try (RocksChunkStore store = RocksChunkStore.open(storePath);
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2))) {
      // As thaw build --devices 0,1 builds it.
      try (GroupFunction.Recording recording = new LlamaRankFunction().record(driver, devices, config)) {
        new GroupImageBuilder(store, new FastCdcChunker()).build(TAG, LlamaRankFunction.class.getName(), recording,
            devices.length, List.of(TokenRequest.body(PROMPTS, NEW_TOKENS, false)), new BuildOptions(),
            ProgressListener.NONE);
      }
      try (LlamaTensorParallel split = LlamaTensorParallel.open(driver, devices, weights, 2, 32)) {
        expected = ids(split.generate(PROMPTS, NEW_TOKENS).tokens()).get("tokens");
      }
    }
    request = TokenRequest.body(PROMPTS, NEW_TOKENS, false).toString().getBytes(StandardCharsets.UTF_8);
  }

  /** The pool on devices 0 and 1 of a node of three simulated devices, workers mapping {@code cache}. */
  private static ContextPoolOptions options(Path store, HostImageCache cache) {
    ContextPoolOptions o = PoolTesting.options(store).setDevices(List.of(0, 1)).setDeviceChoice("sim")
        .setWarmupLaunches(0).setHelperSlotBytes(1 << 20).setHelperMinFreeBytes(0)
        .setEnvironment(Map.of("THAW_DEVICE", "sim", "THAW_SIM_DEVICES", "3"));
    return cache == null ? o : o.setHostCachePath(cache.path());
  }

  /** The group's ranks as stored: rank r's tag, manifest bytes and manifest. */
  private record Rank(String tag, byte[] bytes, ImageManifest manifest) {}

  private static List<Rank> ranks(RocksChunkStore store) {
    GroupImage.Stored g = GroupImage.read(store, TAG);
    List<Rank> out = new ArrayList<>();
    for (int r = 0; r < g.ranks().size(); r++) {
      String tag = g.group().rankTags().get(r);
      out.add(new Rank(tag, store.manifest(tag).orElseThrow(), g.ranks().get(r)));
    }
    return out;
  }

  /** Each rank staged into the host cache (its own lease) and sent to {@code devices.get(r)}. */
  private static List<RankImage> fromCache(List<Rank> ranks, HostImageCache cache, RocksChunkStore store,
      List<Integer> devices) {
    List<RankImage> out = new ArrayList<>();
    for (int r = 0; r < ranks.size(); r++) {
      Rank k = ranks.get(r);
      CacheLease lease = cache.stage(k.tag(), k.manifest(), store);
      out.add(new RankImage(k.tag(), k.bytes(), devices.get(r), ImageSource.hostCache(lease, storePath)));
    }
    return out;
  }

  private static PreparedImage prepared(List<Rank> ranks, HostImageCache cache) {
    List<PreparedImage> images = new ArrayList<>();
    for (Rank k : ranks) {
      images.add(new PreparedImage(PreparedImage.keyOf(k.tag(), k.bytes()), k.tag(), k.bytes(),
          cache.placement(k.tag(), k.manifest())));
    }
    return PreparedImage.group(TAG, images);
  }

  private static JsonNode tokens(Worker w) throws Exception {
    return w.invokeBlocking(request).jsonTree().get("tokens");
  }

  private static long recycled(ContextPool pool) {
    return pool.stats().stream().mapToLong(PoolStats::recycled).sum();
  }

  /** Releases a group's worker and checks that it ended (never recycled) and that no rank's lease still pins. */
  private static void releaseEnds(ContextPool pool, Worker w, HostImageCache cache) throws Exception {
    w.release();
    PoolTesting.awaitExit(w.pid());
    assertNotNull(w.ended().get(WAIT.toSeconds(), TimeUnit.SECONDS), "a released group worker ends");
    assertFalse(w.isAlive());
    assertEquals(0, recycled(pool), "a group's worker is never recycled");
    assertEquals(0, cache.stats().pinnedBytes(), "no rank's lease outlives the worker: " + cache.stats());
  }

  @Test
  void aWorkerBecomesAGroupFromTheHostCachePreparedOrNotAndAnswersTheSplitsIds() throws Exception {
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      List<Rank> ranks = ranks(store);
      ContextPool pool = ContextPool.create(options(storePath, cache));
      try {
        // Staged first, so that the pool prepares every rank from the host cache.
        fromCache(ranks, cache, store, List.of(0, 1)).forEach(r -> r.source().lease().close());
        PreparedImage group = prepared(ranks, cache);
        pool.prepare(group);
        assertTrue(pool.awaitPrepared(WAIT), "every PREPARE answered");

        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        BecomeResult b = w.becomeGroupBlocking(TAG, fromCache(ranks, cache, store, List.of(0, 1)), group);
        assertTrue(b.phases().containsKey("prepared"), "the worker prepared the group for [0, 1]: " + b.phases());
        assertEquals("cache", b.source(), b.toString());
        assertEquals(expected, tokens(w));
        RestoreCompletion done = w.resident().get(WAIT.toSeconds(), TimeUnit.SECONDS);
        assertEquals(ranks.stream().mapToLong(k -> k.manifest().totalBytes()).sum(), done.bytes(), done.toString());
        assertEquals(done.bytes(), done.hostBytes(), "every rank's bytes from the host cache: " + done);
        assertEquals(expected, tokens(w), "and again once resident");
        releaseEnds(pool, w, cache);

        // Not prepared (no key named): every rank's manifest goes whole.
        Worker whole = pool.acquire(0, WAIT);
        seen.add(whole.pid());
        BecomeResult wb = whole.becomeGroupBlocking(TAG, fromCache(ranks, cache, store, List.of(0, 1)), null);
        assertTrue(wb.phases().containsKey("manifests") && !wb.phases().containsKey("prepared"), wb.toString());
        assertEquals(expected, tokens(whole));
        whole.resident().get(WAIT.toSeconds(), TimeUnit.SECONDS);
        releaseEnds(pool, whole, cache);

        // Prepared for [0, 1], started on [0, 2]: the worker's rank-1 context is on the wrong device, so it goes whole.
        assertTrue(pool.awaitPrepared(WAIT));
        Worker moved = pool.acquire(0, WAIT);
        seen.add(moved.pid());
        BecomeResult mb = moved.becomeGroupBlocking(TAG, fromCache(ranks, cache, store, List.of(0, 2)), group);
        assertTrue(mb.phases().containsKey("manifests") && !mb.phases().containsKey("prepared"), mb.toString());
        assertEquals(expected, tokens(moved));
        moved.resident().get(WAIT.toSeconds(), TimeUnit.SECONDS);
        releaseEnds(pool, moved, cache);
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
      assertEquals(0, recycled(pool));
    }
  }

  @Test
  void aBecomeGroupThatCannotBeServedIsRefusedNamingWhyAndTheWorkerEndsCleanly() throws Exception {
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      List<Rank> ranks = ranks(store);
      ContextPool pool = ContextPool.create(options(storePath, cache));
      try {
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        // What the parent can tell is refused at once, before anything is sent: the worker stays as it was.
        IllegalArgumentException one = refusedAtOnce(w, fromCache(ranks.subList(0, 1), cache, store, List.of(0)));
        assertTrue(one.getMessage().contains("two ranks or more, not 1"), one.getMessage());
        IllegalArgumentException notHere = refusedAtOnce(w, fromCache(ranks, cache, store, List.of(1, 0)));
        assertTrue(notHere.getMessage().contains("rank 0 goes to device 1"), notHere.getMessage());
        IllegalArgumentException shared = refusedAtOnce(w, fromCache(ranks, cache, store, List.of(0, 0)));
        assertTrue(shared.getMessage().contains("two ranks share a device"), shared.getMessage());
        assertTrue(w.isAlive());
        assertEquals(0, cache.stats().pinnedBytes(), cache.stats().toString());

        // A device this node lacks: the worker refuses it, naming the rank and the node's devices; released, it ends.
        WorkerException lacks = assertThrows(WorkerException.class,
            () -> w.becomeGroupBlocking(TAG, fromCache(ranks, cache, store, List.of(0, 5)), null));
        assertFalse(lacks.workerLost(), lacks.toString());
        assertTrue(lacks.getMessage().contains("rank 1's device 5 is not one of this node's 3"), lacks.getMessage());
        assertThrows(IllegalStateException.class, () -> w.invoke(request));
        releaseEnds(pool, w, cache);

        // A rank whose manifest is missing from the body, and no group prepared to take it from.
        Worker bare = pool.acquire(0, WAIT);
        seen.add(bare.pid());
        List<RankImage> sent = fromCache(ranks, cache, store, List.of(0, 1));
        RankImage r1 = sent.get(1);
        sent.set(1, new RankImage(r1.tag(), new byte[0], r1.device(), r1.source()));
        WorkerException missing = assertThrows(WorkerException.class, () -> bare.becomeGroupBlocking(TAG, sent, null));
        assertFalse(missing.workerLost(), missing.toString());
        assertTrue(missing.getMessage().contains("rank 1 comes without its manifest"), missing.getMessage());
        releaseEnds(pool, bare, cache);
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  @Test
  void aRankWhoseBytesAreCorruptInTheStoreFailsTheStartNamingItAndTheWorkerEnds() throws Exception {
    Path copy = dir.resolve("store");
    copyTree(storePath, copy);
    Digest victim;
    List<Rank> ranks;
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(copy).setReadOnly(true))) {
      ranks = ranks(store);
      victim = onlyIn(ranks.get(1).manifest(), ranks.get(0).manifest());
    }
    PoolTestImages.corrupt(copy, victim);
    List<Long> seen = new ArrayList<>();
    for (boolean awaitResident : new boolean[] {true, false}) {
      ContextPool pool = ContextPool.create(options(copy, null).setAwaitResident(awaitResident));
      try {
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        List<RankImage> fromStore = new ArrayList<>();
        for (int r = 0; r < ranks.size(); r++) {
          fromStore.add(new RankImage(ranks.get(r).tag(), ranks.get(r).bytes(), r, ImageSource.store(copy)));
        }
        WorkerException e = null;
        try {
          w.becomeGroupBlocking(TAG, fromStore, null);
        } catch (WorkerException thrown) {
          e = thrown;
        }
        if (e == null) {
          // On demand the group may answer before its copy stream reaches the chunk: then the worker ends.
          assertFalse(awaitResident, "a BECOME_GROUP that awaits residency fails itself");
          e = assertThrows(WorkerException.class, () -> WorkerTesting.join(w.resident()));
          PoolTesting.awaitExit(w.pid());
          assertFalse(w.isAlive(), "a group whose restore failed after it became invocable ends");
        }
        assertTrue(e.kind() == WorkerErrorKind.CORRUPT_CHUNK || e.kind() == WorkerErrorKind.IMAGE, e.toString());
        assertTrue(e.getMessage().contains("rank 1"), "names the rank: " + e.getMessage());
        assertTrue(e.getMessage().contains(victim.hex().substring(0, 12)), "names the chunk: " + e.getMessage());
        w.release();
        PoolTesting.awaitExit(w.pid());
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  /** The parent's refusal of {@code ranks}, the leases it never took closed again. */
  private static IllegalArgumentException refusedAtOnce(Worker w, List<RankImage> ranks) {
    try {
      return assertThrows(IllegalArgumentException.class, () -> w.becomeGroup(TAG, ranks, null));
    } finally {
      ranks.forEach(r -> r.source().lease().close());
    }
  }

  /** A chunk of {@code in}'s allocations that {@code notIn} does not share. */
  private static Digest onlyIn(ImageManifest in, ImageManifest notIn) {
    Set<Digest> other = new HashSet<>();
    notIn.allocations().forEach(a -> a.chunks().forEach(c -> other.add(c.digest())));
    return in.allocations().stream().flatMap(a -> a.chunks().stream()).map(ImageManifest.Chunk::digest)
        .filter(d -> !other.contains(d)).findFirst().orElseThrow();
  }

  private static void copyTree(Path from, Path to) throws Exception {
    try (Stream<Path> walk = Files.walk(from)) {
      for (Path p : walk.toList()) {
        Path target = to.resolve(from.relativize(p).toString());
        if (Files.isDirectory(p)) {
          Files.createDirectories(target);
        } else {
          Files.copy(p, target);
        }
      }
    }
  }

  private static ObjectNode ids(int[][] tokens) {
    ObjectNode out = JSON.createObjectNode();
    ArrayNode all = out.putArray("tokens");
    for (int[] row : tokens) {
      ArrayNode a = all.addArray();
      for (int id : row) {
        a.add(id);
      }
    }
    return out;
  }
}
