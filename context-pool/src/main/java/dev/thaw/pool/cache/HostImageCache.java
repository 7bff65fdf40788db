package dev.thaw.pool.cache;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.CorruptChunkException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.host.SharedMemory;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
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
import java.util.concurrent.atomic.AtomicInteger;
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
    /** The uses whose places this extent holds, as indexed in {@code placed}. */
    final List<Use> uses = new ArrayList<>();
    long lastUse;
    int pins;

    Extent(long offset, long length) {
      this.offset = offset;
      this.length = length;
    }
  }

  private record Slot(Extent extent, long offset, int length) {}

  /** A chunk's use at a device address: where a {@link HostCacheOptions.Layout#RUNS} stage put it is indexed by it. */
  private record Use(Digest digest, long device) {}

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
  /**
   * Each use's own place, where a stage gave it one: a repeat held again, or any use of a {@code RUNS} stage. A later
   * stage of the same image (or of one with the same chunks at the same addresses) finds its runs whole here, where
   * {@link #index} knows one place per chunk. Guarded by {@code this}.
   */
  private final Map<Use, Slot> placed = new HashMap<>();
  private final Set<Extent> extents = java.util.Collections.newSetFromMap(new IdentityHashMap<>());
  /** Per image name, its last stage. Guarded by {@code this}. */
  private final Map<String, Staged> staged = new HashMap<>();
  private long clock;
  private long freeBytes;
  private boolean closed;
  private final AtomicLong evictedBytes = new AtomicLong();
  private final AtomicLong hitBytes = new AtomicLong();
  private final AtomicLong stagedBytes = new AtomicLong();
  private final AtomicLong heldAgainBytes = new AtomicLong();

  private HostImageCache(HostCacheOptions options, SharedMemory arena, String path) {
    this.options = options;
    this.arena = arena;
    this.path = path;
    free.put(0L, arena.size());
    freeBytes = arena.size();
    AtomicInteger n = new AtomicInteger();
    this.stagers = Executors.newFixedThreadPool(options.stagingThreads(), r -> {
      Thread t = new Thread(r, "thaw-cache-stage-" + n.incrementAndGet());
      t.setDaemon(true);
      return t;
    });
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
   * @throws dev.thaw.image.store.ChunkNotFoundException naming a chunk the store lacks
   * @throws HostCacheFullException if no room can be made without evicting pinned chunks
   */
  public CacheLease stage(String image, ImageManifest manifest, ChunkStore store) {
    long t0 = System.nanoTime();
    List<ChunkPlacement.Entry> uses = RestoreOrder.uses(manifest);
    Map<Digest, Integer> lengths = RestoreOrder.lengths(manifest);
    Layout layout;
    Extent fresh = null;
    Set<Extent> referenced = java.util.Collections.newSetFromMap(new IdentityHashMap<>());
    List<Extent> pinned = new ArrayList<>();
    synchronized (this) {
      checkOpen();
      layout = layout(uses);
      Set<Extent> touched = java.util.Collections.newSetFromMap(new IdentityHashMap<>());
      for (Slot s : layout.shared) {
        if (s != null) {
          referenced.add(s.extent());
          touched.add(s.extent());
        }
      }
      for (Place p : layout.places) {
        if (p.from != null) {
          touched.add(p.from.extent());
        }
      }
      // Pinned before making room: an extent the new one shares or copies from is never the one evicted for it.
      for (Extent e : touched) {
        e.pins++;
        pinned.add(e);
      }
      if (layout.freshBytes > 0) {
        long need = align(layout.freshBytes);
        long at = allocate(need);
        if (at < 0) {
          unpinLocked(pinned);
          throw new HostCacheFullException(image, need, arena.size(), pinnedBytesLocked());
        }
        fresh = new Extent(at, need);
        fresh.pins = 1;
        extents.add(fresh);
        referenced.add(fresh);
        pinned.add(fresh);
      }
    }
    long base = fresh == null ? 0 : fresh.offset;
    if (fresh != null) {
      try {
        fill(layout.places, base, store, image);
      } catch (RuntimeException | Error e) {
        synchronized (this) {
          extents.remove(fresh);
          release(fresh.offset, fresh.length);
          unpinLocked(pinned);
        }
        throw e;
      }
    }
    List<ChunkPlacement.Entry> entries = new ArrayList<>(uses.size());
    List<Extent> pins = new ArrayList<>();
    synchronized (this) {
      long now = ++clock;
      for (Place p : layout.places) {
        if (p.from == null && p.copyOf == null && index.putIfAbsent(p.digest, new Slot(fresh, base + p.at, p.length))
            == null) {
          fresh.chunks.add(p.digest);
        }
      }
      for (int i = 0; i < uses.size(); i++) {
        ChunkPlacement.Entry u = uses.get(i);
        long offset = layout.shared[i] != null ? layout.shared[i].offset() : base + layout.placeOf[i].at;
        entries.add(new ChunkPlacement.Entry(u.digest(), offset, u.length(), u.device()));
        if (layout.shared[i] == null && u.device() != ChunkPlacement.NO_DEVICE) {
          Use use = new Use(u.digest(), u.device());
          placed.put(use, new Slot(fresh, offset, u.length()));
          fresh.uses.add(use);
        }
      }
      List<Extent> sourcesOnly = new ArrayList<>();
      for (Extent e : pinned) {
        if (referenced.contains(e)) {
          e.lastUse = now;
          pins.add(e);
        } else {
          sourcesOnly.add(e);
        }
      }
      unpinLocked(sourcesOnly);
    }
    long imageBytes = lengths.values().stream().mapToLong(Integer::longValue).sum();
    hitBytes.addAndGet(imageBytes - layout.readBytes);
    stagedBytes.addAndGet(layout.readBytes);
    heldAgainBytes.addAndGet(layout.freshBytes - layout.readBytes);
    List<Extent> held = List.copyOf(pins);
    ChunkPlacement placement = new ChunkPlacement(path, entries);
    synchronized (this) {
      staged.put(image, new Staged(manifest, placement, held, imageBytes));
    }
    return new CacheLease(image, placement, layout.readBytes, (System.nanoTime() - t0) / 1e6, () -> unpin(held));
  }

  /**
   * A lease on an image staged before, when all of its chunks are still where that stage put them: a pin per
   * extent, no chunk looked up, so a cold start pays microseconds for it. Null when {@code manifest} is not
   * (the same object as) the one last staged under {@code image}, or an extent of it was evicted since: then
   * {@link #stage} it.
   */
  public synchronized CacheLease lease(String image, ImageManifest manifest) {
    checkOpen();
    Staged s = staged.get(image);
    if (s == null || s.manifest() != manifest) {
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
    Staged s = staged.get(image);
    if (s == null || s.manifest() != manifest || !s.extents().stream().allMatch(extents::contains)) {
      return null;
    }
    return s.placement();
  }

  /**
   * A new place in the stage's extent, {@code at} bytes from its start: filled from the store and verified there
   * (neither {@code from} nor {@code copyOf}), or copied from a verified place of the same chunk, a slot of the arena
   * ({@code from}) or an earlier new place of this stage ({@code copyOf}).
   */
  private record Place(Digest digest, long at, int length, Slot from, Place copyOf) {}

  /** Each use's place: a slot shared with what is in the arena already, or a new place. */
  private static final class Layout {
    final Slot[] shared;
    final Place[] placeOf;
    final List<Place> places = new ArrayList<>();
    long freshBytes;
    long readBytes;

    Layout(int uses) {
      shared = new Slot[uses];
      placeOf = new Place[uses];
    }

    Place add(Digest digest, int length, Slot from, Place copyOf) {
      Place p = new Place(digest, freshBytes, length, from, copyOf);
      places.add(p);
      freshBytes += length;
      if (from == null && copyOf == null) {
        readBytes += length;
      }
      return p;
    }
  }

  /**
   * Under the lock: decides each use's place by the cache's {@link HostCacheOptions.Layout}. {@code SHARED}: a chunk
   * in the arena already is used where it is; a missing one gets one new place, which its repeats share. {@code RUNS}:
   * every use of an allocation chunk gets a new place, in order, except runs of at least
   * {@link HostCacheOptions.Layout#SHARED_RUN_BYTES} that lie back to back both on the device and elsewhere in the
   * arena (an earlier stage of identical weights), which are shared. Cubins, never copied to the device, are placed
   * as with {@code SHARED}.
   */
  private Layout layout(List<ChunkPlacement.Entry> uses) {
    int n = uses.size();
    Layout l = new Layout(n);
    Map<Digest, Place> firstHere = new HashMap<>();
    boolean runs = options.layout() == HostCacheOptions.Layout.RUNS;
    int i = 0;
    while (i < n) {
      ChunkPlacement.Entry u = uses.get(i);
      Slot there = index.get(u.digest());
      Place here = firstHere.get(u.digest());
      if (!runs || u.device() == ChunkPlacement.NO_DEVICE) {
        if (there != null) {
          l.shared[i] = there;
        } else if (here != null) {
          l.placeOf[i] = here;
        } else {
          Place p = l.add(u.digest(), u.length(), null, null);
          firstHere.put(u.digest(), p);
          l.placeOf[i] = p;
        }
        i++;
        continue;
      }
      Slot[] run = sharedRun(uses, i);
      if (run.length > 0) {
        System.arraycopy(run, 0, l.shared, i, run.length);
        i += run.length;
        continue;
      }
      Place p = l.add(u.digest(), u.length(), there, there == null ? here : null);
      if (there == null && here == null) {
        firstHere.put(u.digest(), p);
      }
      l.placeOf[i] = p;
      i++;
    }
    return l;
  }

  /**
   * Under the lock: the slots of the run of uses from {@code from} that lie back to back in one extent of the arena as
   * they do on the device (each use's own place from an earlier stage, else its chunk's), if sharing it breaks no run
   * of this image's (it is a whole run of the device: no use next to it on the device in restore order) or it holds at
   * least {@link HostCacheOptions.Layout#SHARED_RUN_BYTES}; else none.
   */
  private Slot[] sharedRun(List<ChunkPlacement.Entry> uses, int from) {
    List<Slot> run = new ArrayList<>();
    long bytes = 0;
    int j = from;
    while (j < uses.size()) {
      ChunkPlacement.Entry v = uses.get(j);
      if (v.device() == ChunkPlacement.NO_DEVICE) {
        break;
      }
      Slot s = placed.get(new Use(v.digest(), v.device()));
      if (s == null) {
        s = index.get(v.digest());
      }
      if (s == null) {
        break;
      }
      if (j > from) {
        ChunkPlacement.Entry p = uses.get(j - 1);
        Slot ps = run.get(run.size() - 1);
        if (s.extent() != ps.extent() || ps.offset() + p.length() != s.offset() || !followsOnDevice(p, v)) {
          break;
        }
      }
      run.add(s);
      bytes += v.length();
      j++;
    }
    boolean whole = !run.isEmpty() && (from == 0 || !followsOnDevice(uses.get(from - 1), uses.get(from)))
        && (j == uses.size() || !followsOnDevice(uses.get(j - 1), uses.get(j)));
    return whole || bytes >= HostCacheOptions.Layout.SHARED_RUN_BYTES ? run.toArray(new Slot[0]) : new Slot[0];
  }

  /** True when {@code next} is restored right after {@code previous} on the device. */
  private static boolean followsOnDevice(ChunkPlacement.Entry previous, ChunkPlacement.Entry next) {
    return previous.device() != ChunkPlacement.NO_DEVICE && next.device() != ChunkPlacement.NO_DEVICE
        && previous.device() + previous.length() == next.device();
  }

  /**
   * Fills the new places on the staging threads, the first failure winning: each chunk missing from the arena is read
   * from the store into its first place and verified there; then every other new place is copied from a verified
   * place of its chunk (already in the arena, pinned by the stage, or just read), so nothing is read or hashed twice.
   */
  private void fill(List<Place> places, long base, ChunkStore store, String image) {
    List<CompletableFuture<Void>> reads = new ArrayList<>();
    for (Place p : places) {
      if (p.from() == null && p.copyOf() == null) {
        reads.add(CompletableFuture.runAsync(() -> readVerified(store, p.digest(), arena.slice(base + p.at(),
            p.length()), image), stagers));
      }
    }
    join(reads);
    List<CompletableFuture<Void>> copies = new ArrayList<>();
    for (Place p : places) {
      if (p.from() != null || p.copyOf() != null) {
        long source = p.from() != null ? p.from().offset() : base + p.copyOf().at();
        copies.add(CompletableFuture.runAsync(() -> arena.slice(base + p.at(), p.length())
            .put(arena.slice(source, p.length())), stagers));
      }
    }
    join(copies);
  }

  private static void join(List<CompletableFuture<Void>> work) {
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

  private static void readVerified(ChunkStore store, Digest digest, ByteBuffer place, String image) {
    int expected = place.remaining();
    int n;
    try {
      n = store.readChunk(digest, place.duplicate());
    } catch (dev.thaw.image.store.CorruptChunkException e) {
      throw new CorruptChunkException(digest, "the store found it damaged (" + e.getMessage() + "); refused by the "
          + "host cache");
    } catch (IllegalArgumentException e) {
      throw new CorruptChunkException(digest, "it holds more than the " + expected + " bytes image '" + image
          + "' says; refused by the host cache");
    }
    if (n != expected) {
      throw new CorruptChunkException(digest, "it holds " + n + " bytes, image '" + image + "' says " + expected
          + "; refused by the host cache");
    }
    Digest actual = Digest.of(place);
    if (!actual.equals(digest)) {
      throw new CorruptChunkException(digest, "its bytes hash to " + actual + "; refused by the host cache");
    }
  }

  // ---- space ----

  private static long align(long bytes) {
    long a = HostCacheOptions.ALIGNMENT;
    return (bytes + a - 1) / a * a;
  }

  /** A free run of {@code need} bytes, evicting least recently used unpinned extents as needed; -1 if none. */
  private long allocate(long need) {
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
    for (Use u : e.uses) {
      Slot s = placed.get(u);
      if (s != null && s.extent() == e) {
        placed.remove(u);
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

  /**
   * A snapshot of the cache's occupancy and traffic. {@code heldAgainBytes}: bytes stages wrote into the arena by
   * copying a chunk it held already, to keep an image's runs contiguous ({@link HostCacheOptions.Layout#RUNS}).
   */
  public record Stats(long capacity, long usedBytes, long pinnedBytes, int chunks, int extents, long stagedBytes,
      long hitBytes, long evictedBytes, long heldAgainBytes) {}

  public synchronized Stats stats() {
    return new Stats(arena.size(), arena.size() - freeBytes, pinnedBytesLocked(), index.size(), extents.size(),
        stagedBytes.get(), hitBytes.get(), evictedBytes.get(), heldAgainBytes.get());
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
