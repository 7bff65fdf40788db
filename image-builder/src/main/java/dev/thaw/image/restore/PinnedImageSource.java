package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.host.Threads;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A host cache of one image in this process: every distinct chunk of the image read from the store once, verified
 * against its digest and kept in one pinned buffer, laid out in restore order so that each allocation's chunks lie
 * back to back (and copy as one). What a restore from memory in a single process uses; a pooled worker uses the
 * server's shared cache instead, through the same {@link RestoreSource} interface.
 *
 * <p>Closing it frees the buffer once no lease is open any more: a restore in flight keeps the bytes alive.
 */
public final class PinnedImageSource implements RestoreSource, AutoCloseable {

  private final PinnedBuffer buffer;
  private final Map<Digest, Long> offsets;
  /** This source's own hold plus one per open lease; the buffer is freed when it reaches 0. */
  private final AtomicInteger holds = new AtomicInteger(1);
  private final AtomicBoolean closed = new AtomicBoolean();

  private PinnedImageSource(PinnedBuffer buffer, Map<Digest, Long> offsets) {
    this.buffer = buffer;
    this.offsets = offsets;
  }

  /**
   * Reads and verifies every chunk of {@code plan}'s image (allocations and cubins) into pinned memory of
   * {@code context}, with {@code threads} readers.
   *
   * @throws CorruptChunkException naming a chunk whose bytes do not match its digest
   * @throws ChunkNotFoundException naming a chunk the store lacks
   */
  public static PinnedImageSource load(RestorePlan plan, ChunkStore store, GpuContext context, int threads) {
    Map<Digest, Integer> lengths = new LinkedHashMap<>();
    for (int u = 0; u < plan.unitCount(); u++) {
      plan.unit(u).chunks().forEach(c -> lengths.putIfAbsent(c.digest(), c.length()));
    }
    plan.manifest().modules().forEach(m -> lengths.putIfAbsent(m.cubin().digest(), m.cubin().length()));
    Map<Digest, Long> offsets = new HashMap<>();
    long size = 0;
    for (Map.Entry<Digest, Integer> e : lengths.entrySet()) {
      offsets.put(e.getKey(), size);
      size += e.getValue();
    }
    PinnedBuffer buffer = context.allocatePinned(Math.max(1, size));
    ExecutorService readers =
        Executors.newFixedThreadPool(Math.max(1, threads), Threads.daemonFactory("thaw-host-cache-load"));
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
    } catch (Exception e) {
      buffer.close();
      Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
      if (cause instanceof RuntimeException r) {
        throw r;
      }
      throw new ImageRestoreException("loading the host cache failed: " + cause, cause);
    } finally {
      readers.shutdownNow();
    }
    return new PinnedImageSource(buffer, Map.copyOf(offsets));
  }

  /** Bytes held: each distinct chunk once. */
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
