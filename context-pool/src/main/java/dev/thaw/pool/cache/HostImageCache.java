package dev.thaw.pool.cache;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.CorruptChunkException;
import dev.thaw.image.restore.VerifiedChunks;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.host.SharedMemory;
import dev.thaw.runtime.host.Threads;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The pinned host image cache, parent side: a shared-memory arena the server owns and every worker maps
 * read-only and registers once ({@link HostCacheView}). Images enter it from the {@link ChunkStore} with
 * {@link #stage}; a restore reads them from there at host-to-device copy speed.
 *
 * <p><b>Verified once.</b> A chunk enters the arena by being read from the store straight into its place and
 * hashed there; it becomes visible (indexed, placed) only if its SHA-256 matches its name. A corrupt chunk is
 * refused with a {@link CorruptChunkException} naming it and its space is returned: it is never served. After
 * that, bytes in the arena are trusted: workers map them read-only and no one but this class writes them.
 *
 * <p><b>Laid out for copies.</b> The chunks an image lacks are placed back to back in one contiguous extent,
 * in {@link RestoreOrder}, so a restore that walks the image in that order finds host runs as long as the
 * device runs and coalesces them into a few large copies (55 GB/s, against 35 GB/s for 256 KiB copies).
 *
 * <p><b>Shared by digest.</b> A chunk already in the arena, staged for any image, is reused, not copied again.
 *
 * <p><b>Evicted by bytes, whole extents, least recently used.</b> The unit that enters together leaves
 * together: evicting one extent returns one contiguous hole, which is what the next image needs. An extent a
 * {@link CacheLease} pins (an image being restored from it, or sharing a chunk in it) is never evicted; when no
 * hole large enough can be made from unpinned extents, {@link #stage} throws {@link HostCacheFullException} and
 * changes nothing. See {@code docs/design/memory-tiers.md} for why LRU over extents.
 *
 * <p>Thread-safe: bookkeeping is under one lock, reading and hashing run outside it on the staging threads.
 */
public final class HostImageCache implements AutoCloseable {

  /** One stage's contiguous run of arena bytes, and the chunks indexed in it. */
  private static final class Extent {
    final long offset;
    final long length;
    final List<Digest> chunks = new ArrayList<>();
    long lastUse;
    int pins;

    Extent(long offset, long length) {
      this.offset = offset;
      this.length = length;
    }
  }

  private record Slot(Extent extent, long offset, int length) {}

  /**
   * What the last stage of an image placed, and the extents its chunks lie in: while all of those extents are in
   * the arena (an extent is only ever evicted whole, and its bytes never change), the placement still holds.
   */
  private record Staged(ImageManifest manifest, ChunkPlacement placement, List<Extent> extents, long bytes) {}

  private final HostCacheOptions options;
  private final SharedMemory arena;
  private final String path;
  private final ExecutorService stagers;
  /** Free arena bytes, offset to length; disjoint, never adjacent (merged). Guarded by {@code this}. */
  private final TreeMap<Long, Long> free = new TreeMap<>();
  private final Map<Digest, Slot> index = new HashMap<>();
  private final Set<Extent> extents = Collections.newSetFromMap(new IdentityHashMap<>());
  /** Per image name, its last stage. Guarded by {@code this}. */
  private final Map<String, Staged> staged = new HashMap<>();
  private long clock;
  private long freeBytes;
  private boolean closed;
  private final AtomicLong evictedBytes = new AtomicLong();
  private final AtomicLong hitBytes = new AtomicLong();
  private final AtomicLong stagedBytes = new AtomicLong();

  private HostImageCache(HostCacheOptions options, SharedMemory arena, String path) {
    this.options = options;
    this.arena = arena;
    this.path = path;
    free.put(0L, arena.size());
    freeBytes = arena.size();
    this.stagers = Executors.newFixedThreadPool(options.stagingThreads(), Threads.daemonFactory("thaw-cache-stage"));
  }

  /** Creates the arena (zero bytes; tmpfs pages are taken as chunks are written). */
  public static HostImageCache create(HostCacheOptions options) throws IOException {
    long size = options.capacityBytes() / HostCacheOptions.ALIGNMENT * HostCacheOptions.ALIGNMENT;
    if (options.directory() == null) {
      SharedMemory m = SharedMemory.anonymous("thaw-host-cache", size);
      return new HostImageCache(options, m, "/proc/" + ProcessFds.currentPid() + "/fd/" + m.fd());
    }
    Path file = options.directory().resolve("thaw-cache-" + ProcessFds.currentPid() + "-" + UUID.randomUUID());
    SharedMemory m = SharedMemory.create(file, size);
    return new HostImageCache(options, m, file.toString());
  }

  /** The path a worker maps: {@link HostCacheView#attach}. */
  public Path path() {
    return Path.of(path);
  }

  public long capacity() {
    return arena.size();
  }

  public HostCacheOptions options() {
    return options;
  }

  /** True if a verified copy of the chunk is in the arena. */
  public synchronized boolean contains(Digest digest) {
    return index.containsKey(digest);
  }

  /**
   * Makes every chunk of {@code manifest} (allocations and cubins) present and verified in the arena, reading
   * what is missing from {@code store}, and pins them all until the returned lease is closed.
   *
   * @param image the image's name, for messages
   * @throws CorruptChunkException naming a chunk whose stored bytes do not match its digest (nothing of this
   *     stage stays in the cache)
   * @throws ChunkNotFoundException naming a chunk the store lacks
   * @throws HostCacheFullException if no room can be made without evicting pinned chunks
   */
  public CacheLease stage(String image, ImageManifest manifest, ChunkStore store) {
    return stage(image, manifest, store, true);
  }

  /**
   * {@link #stage}, evicting nothing when {@code mayEvict} is false: an image that does not fit in the free space as
   * it is gets {@link HostCacheFullException} (and the cache is unchanged). What a registration stages ahead must
   * not push out what cold starts used.
   */
  public CacheLease stage(String image, ImageManifest manifest, ChunkStore store, boolean mayEvict) {
    long t0 = System.nanoTime();
    List<Digest> order = RestoreOrder.chunks(manifest);
    Map<Digest, Integer> lengths = RestoreOrder.lengths(manifest);
    List<Extent> pinned = new ArrayList<>();
    List<Digest> missing = new ArrayList<>();
    long missingBytes = 0;
    Extent fresh = null;
    synchronized (this) {
      checkOpen();
      Set<Extent> hit = Collections.newSetFromMap(new IdentityHashMap<>());
      for (Digest d : order) {
        Slot s = index.get(d);
        if (s != null) {
          hit.add(s.extent());
        } else {
          missing.add(d);
          missingBytes += lengths.get(d);
        }
      }
      for (Extent e : hit) {
        e.pins++;
        pinned.add(e);
      }
      if (!missing.isEmpty()) {
        long need = align(missingBytes);
        long at = allocate(need, mayEvict);
        if (at < 0) {
          unpinLocked(pinned);
          throw new HostCacheFullException(image, need, arena.size(), pinnedBytesLocked());
        }
        fresh = new Extent(at, need);
        fresh.pins = 1;
        extents.add(fresh);
        pinned.add(fresh);
      }
    }
    Map<Digest, Long> placedFresh = new HashMap<>();
    if (fresh != null) {
      long at = fresh.offset;
      for (Digest d : missing) {
        placedFresh.put(d, at);
        at += lengths.get(d);
      }
      try {
        fill(missing, placedFresh, lengths, store, image);
      } catch (RuntimeException | Error e) {
        synchronized (this) {
          extents.remove(fresh);
          release(fresh.offset, fresh.length);
          unpinLocked(pinned);
        }
        throw e;
      }
    }
    List<ChunkPlacement.Entry> entries = new ArrayList<>(order.size());
    synchronized (this) {
      long now = ++clock;
      if (fresh != null) {
        for (Digest d : missing) {
          Slot slot = new Slot(fresh, placedFresh.get(d), lengths.get(d));
          if (index.putIfAbsent(d, slot) == null) {
            fresh.chunks.add(d);
          }
        }
      }
      for (Digest d : order) {
        Long mine = placedFresh.get(d);
        long offset = mine != null ? mine : index.get(d).offset();
        entries.add(new ChunkPlacement.Entry(d, offset, lengths.get(d)));
      }
      for (Extent e : pinned) {
        e.lastUse = now;
      }
    }
    long imageBytes = lengths.values().stream().mapToLong(Integer::longValue).sum();
    hitBytes.addAndGet(imageBytes - missingBytes);
    stagedBytes.addAndGet(missingBytes);
    List<Extent> pins = List.copyOf(pinned);
    ChunkPlacement placement = new ChunkPlacement(path, entries);
    synchronized (this) {
      staged.put(image, new Staged(manifest, placement, pins, imageBytes));
    }
    return new CacheLease(image, placement, missingBytes, (System.nanoTime() - t0) / 1e6, () -> unpin(pins));
  }

  /**
   * A lease on an image staged before, when all of its chunks are still where that stage put them: a pin per
   * extent, no chunk looked up, so a cold start pays microseconds for it. Null when {@code manifest} is not the one
   * last staged under {@code image} (the same object, or an equal one read again, say by a registration since, which
   * the stage then keeps), or an extent of it was evicted since: then {@link #stage} it.
   */
  public synchronized CacheLease lease(String image, ImageManifest manifest) {
    checkOpen();
    Staged s = sameAsStaged(image, manifest);
    if (s == null) {
      return null;
    }
    for (Extent e : s.extents()) {
      if (!extents.contains(e)) {
        staged.remove(image);
        return null;
      }
    }
    long now = ++clock;
    for (Extent e : s.extents()) {
      e.pins++;
      e.lastUse = now;
    }
    hitBytes.addAndGet(s.bytes());
    List<Extent> pins = s.extents();
    return new CacheLease(image, s.placement(), 0, 0, () -> unpin(pins));
  }

  /**
   * Where the last stage of {@code manifest} under {@code image} put its chunks, if they are all still there;
   * else null. Pins nothing: the answer may be stale by the time it is used (a worker preparing the image from it
   * checks what it reads, and {@link #lease} says again at the cold start).
   */
  public synchronized ChunkPlacement placement(String image, ImageManifest manifest) {
    Staged s = sameAsStaged(image, manifest);
    if (s == null || !s.extents().stream().allMatch(extents::contains)) {
      return null;
    }
    return s.placement();
  }

  /**
   * What the last stage of {@code image} put where, if it staged {@code manifest}: that object (a reference compare),
   * or an equal one, which the stage keeps from then on; else null.
   */
  private Staged sameAsStaged(String image, ImageManifest manifest) {
    Staged s = staged.get(image);
    if (s == null || s.manifest() == manifest) {
      return s;
    }
    if (!s.manifest().equals(manifest)) {
      return null;
    }
    Staged now = new Staged(manifest, s.placement(), s.extents(), s.bytes());
    staged.put(image, now);
    return now;
  }

  /** Reads and verifies the chunks into their places on the staging threads; the first failure wins. */
  private void fill(List<Digest> chunks, Map<Digest, Long> at, Map<Digest, Integer> lengths, ChunkStore store,
      String image) {
    List<CompletableFuture<Void>> work = new ArrayList<>(chunks.size());
    for (Digest d : chunks) {
      long offset = at.get(d);
      int length = lengths.get(d);
      work.add(CompletableFuture.runAsync(() -> VerifiedChunks.read(store, d, arena.slice(offset, length),
          "image '" + image + "', refused by the host cache"), stagers));
    }
    try {
      CompletableFuture.allOf(work.toArray(CompletableFuture[]::new)).join();
    } catch (CompletionException e) {
      Throwable c = e.getCause();
      if (c instanceof RuntimeException r) {
        throw r;
      }
      if (c instanceof Error err) {
        throw err;
      }
      throw e;
    }
  }

  // ---- space ----

  private static long align(long bytes) {
    long a = HostCacheOptions.ALIGNMENT;
    return (bytes + a - 1) / a * a;
  }

  /**
   * A free run of {@code need} bytes, evicting least recently used unpinned extents as needed (and allowed); -1 if
   * none.
   */
  private long allocate(long need, boolean mayEvict) {
    for (;;) {
      for (Map.Entry<Long, Long> f : free.entrySet()) {
        if (f.getValue() >= need) {
          long at = f.getKey();
          free.remove(at);
          if (f.getValue() > need) {
            free.put(at + need, f.getValue() - need);
          }
          freeBytes -= need;
          return at;
        }
      }
      if (!mayEvict) {
        return -1;
      }
      Extent victim = null;
      for (Extent e : extents) {
        if (e.pins == 0 && (victim == null || e.lastUse < victim.lastUse)) {
          victim = e;
        }
      }
      if (victim == null) {
        return -1;
      }
      evict(victim);
    }
  }

  private void evict(Extent e) {
    for (Digest d : e.chunks) {
      Slot s = index.get(d);
      if (s != null && s.extent() == e) {
        index.remove(d);
      }
    }
    extents.remove(e);
    release(e.offset, e.length);
    evictedBytes.addAndGet(e.length);
  }

  private void release(long offset, long length) {
    long start = offset;
    long len = length;
    Map.Entry<Long, Long> below = free.floorEntry(start);
    if (below != null && below.getKey() + below.getValue() == start) {
      free.remove(below.getKey());
      start = below.getKey();
      len += below.getValue();
    }
    Long above = free.get(offset + length);
    if (above != null) {
      free.remove(offset + length);
      len += above;
    }
    free.put(start, len);
    freeBytes += length;
  }

  private synchronized void unpin(List<Extent> pins) {
    unpinLocked(pins);
  }

  private void unpinLocked(List<Extent> pins) {
    for (Extent e : pins) {
      e.pins--;
    }
  }

  private long pinnedBytesLocked() {
    return extents.stream().filter(e -> e.pins > 0).mapToLong(e -> e.length).sum();
  }

  // ---- observation ----

  /** A snapshot of the cache's occupancy and traffic. */
  public record Stats(long capacity, long usedBytes, long pinnedBytes, int chunks, int extents, long stagedBytes,
      long hitBytes, long evictedBytes) {}

  public synchronized Stats stats() {
    return new Stats(arena.size(), arena.size() - freeBytes, pinnedBytesLocked(), index.size(), extents.size(),
        stagedBytes.get(), hitBytes.get(), evictedBytes.get());
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException("the host cache is closed");
    }
  }

  /** Stops staging, unmaps the arena and removes its file. Workers' mappings stay valid until they unmap. */
  @Override
  public void close() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    stagers.shutdownNow();
    arena.close();
  }

  @Override
  public String toString() {
    return "HostImageCache[" + path + ", " + stats() + "]";
  }
}
