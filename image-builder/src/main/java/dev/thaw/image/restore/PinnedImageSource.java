package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A host cache of one image in this process: every distinct chunk of the image read from the store once, verified
 * against its digest and kept in one pinned buffer, laid out in {@link RestorePlan#runOrder()} with every use of a
 * repeated chunk in its place (copied there from the verified first one), so that a packed image's runs lie back to
 * back (and copy as one). What a restore from memory in a single process uses; a pooled worker uses the server's
 * shared cache instead, through the same {@link RestoreSource} interface.
 *
 * <p>Closing it frees the buffer once no lease is open any more: a restore in flight keeps the bytes alive.
 */
public final class PinnedImageSource implements RestoreSource, AutoCloseable {

  private final PinnedBuffer buffer;
  /** Each distinct chunk's first place. */
  private final Map<Digest, Long> offsets;
  /** Each allocation chunk's place, by the device address of its use. */
  private final Map<Long, Use> uses;

  private record Use(Digest digest, long at) {}
  /** This source's own hold plus one per open lease; the buffer is freed when it reaches 0. */
  private final AtomicInteger holds = new AtomicInteger(1);
  private final AtomicBoolean closed = new AtomicBoolean();

  private PinnedImageSource(PinnedBuffer buffer, Map<Digest, Long> offsets, Map<Long, Use> uses) {
    this.buffer = buffer;
    this.offsets = offsets;
    this.uses = uses;
  }

  /**
   * Reads and verifies every chunk of {@code plan}'s image (allocations and cubins) into pinned memory of
   * {@code context}, with {@code threads} readers.
   *
   * @throws CorruptChunkException naming a chunk whose bytes do not match its digest
   * @throws dev.thaw.image.store.ChunkNotFoundException naming a chunk the store lacks
   */
  public static PinnedImageSource load(RestorePlan plan, ChunkStore store, GpuContext context, int threads) {
    Map<Digest, Integer> lengths = new LinkedHashMap<>();
    Map<Digest, Long> offsets = new HashMap<>();
    Map<Long, Use> uses = new HashMap<>();
    /** Places after the first of a chunk: {to, from, length}. */
    List<long[]> repeats = new ArrayList<>();
    long size = 0;
    for (ImageManifest.Module m : plan.manifest().modules()) {
      if (lengths.putIfAbsent(m.cubin().digest(), m.cubin().length()) == null) {
        offsets.put(m.cubin().digest(), size);
        size += m.cubin().length();
      }
    }
    for (ImageManifest.Allocation a : plan.runOrder()) {
      for (ImageManifest.Chunk c : a.chunks()) {
        uses.put(a.address() + c.offset(), new Use(c.digest(), size));
        Long first = offsets.putIfAbsent(c.digest(), size);
        if (first == null) {
          lengths.put(c.digest(), c.length());
        } else {
          repeats.add(new long[] {size, first, c.length()});
        }
        size += c.length();
      }
    }
    PinnedBuffer buffer = context.allocatePinned(Math.max(1, size));
    ExecutorService readers = Executors.newFixedThreadPool(Math.max(1, threads), r -> {
      Thread t = new Thread(r, "thaw-host-cache-load");
      t.setDaemon(true);
      return t;
    });
    try {
      List<Future<?>> reads = new ArrayList<>(lengths.size());
      for (Map.Entry<Digest, Integer> e : lengths.entrySet()) {
        long at = offsets.get(e.getKey());
        reads.add(readers.submit(() -> VerifiedChunks.read(store, e.getKey(), buffer.slice(at, e.getValue()),
            "the host cache of " + plan.manifest().function().className())));
      }
      for (Future<?> f : reads) {
        f.get();
      }
      // Verified above: a repeat is a copy of its chunk's first place.
      for (long[] r : repeats) {
        buffer.slice(r[0], (int) r[2]).put(buffer.slice(r[1], (int) r[2]));
      }
    } catch (Exception e) {
      buffer.close();
      Throwable cause = e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
      if (cause instanceof RuntimeException r) {
        throw r;
      }
      throw new ImageRestoreException("loading the host cache failed: " + cause, cause);
    } finally {
      readers.shutdownNow();
    }
    return new PinnedImageSource(buffer, Map.copyOf(offsets), Map.copyOf(uses));
  }

  /** Bytes held: each distinct cubin once, every use of an allocation chunk in its place. */
  public long bytes() {
    return buffer.size();
  }

  @Override
  public Lease lease(ImageManifest manifest) {
    if (holds.getAndUpdate(h -> h == 0 ? 0 : h + 1) == 0) {
      throw new IllegalStateException("the host cache is closed");
    }
    return new Lease() {
      private final AtomicBoolean open = new AtomicBoolean(true);

      @Override
      public HostChunk find(Digest digest) {
        Long at = offsets.get(digest);
        return at == null ? null : new HostChunk(buffer, at);
      }

      @Override
      public HostChunk find(long device, Digest digest) {
        Use u = uses.get(device);
        return u == null || !u.digest().equals(digest) ? find(digest) : new HostChunk(buffer, u.at());
      }

      @Override
      public void close() {
        if (open.compareAndSet(true, false)) {
          release();
        }
      }
    };
  }

  private void release() {
    if (holds.decrementAndGet() == 0) {
      buffer.close();
    }
  }

  /** Frees the buffer now, or when the last open lease closes. Idempotent. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true)) {
      release();
    }
  }
}
