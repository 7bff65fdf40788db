package dev.thaw.pool.hbm;

import dev.thaw.runtime.host.ProcessFds;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The HBM-resident tier, server side: for each image, the read-only slabs an evicted worker left on the device,
 * held as POSIX descriptors. Holding a descriptor keeps the device memory alive after its worker exits; the next
 * worker for the image takes the descriptors ({@link ResidentSlabs#take}) and maps the memory read-only at the
 * recorded addresses instead of copying it. A second instance of an image can take them while the first runs:
 * both map one copy of the weights.
 *
 * <p>The tier is a cache that gives way: it holds at most {@link HbmTierOptions#maxBytes()} per device and
 * {@link #giveWay} drops least recently used images (closing descriptors frees device memory no worker maps) when
 * an admission needs room; the pool calls it before it refuses anything for want of memory.
 *
 * <p>One tier per device. Thread-safe.
 */
public final class HbmTier implements AutoCloseable {

  private record Held(List<ExportedSlab> slabs, long bytes) {}

  private final HbmTierOptions options;
  /** Access order: least recently used first. */
  private final LinkedHashMap<String, Held> images = new LinkedHashMap<>(16, 0.75f, true);
  private long bytes;
  private boolean closed;

  public HbmTier(HbmTierOptions options) {
    this.options = options;
  }

  /**
   * Takes an evicted worker's exported slabs ({@link HbmExport#exportReadOnly}, descriptors of process
   * {@code workerPid}) for {@code image}. Replaces what the tier held for that image. Returns false (taking
   * nothing) when the slabs alone exceed the tier's budget.
   *
   * @throws IOException if a descriptor cannot be taken (the worker is gone, or no ptrace permission over it)
   */
  public boolean offer(String image, long workerPid, List<ExportedSlab> slabs) throws IOException {
    long size = ExportedSlab.bytes(slabs);
    if (size == 0 || size > options.maxBytes()) {
      return false;
    }
    List<ExportedSlab> mine = new ArrayList<>(slabs.size());
    try {
      for (ExportedSlab s : slabs) {
        mine.add(s.withFd(ProcessFds.take(workerPid, s.fd())));
      }
    } catch (IOException e) {
      HbmExport.close(mine);
      throw e;
    }
    synchronized (this) {
      if (closed) {
        HbmExport.close(mine);
        throw new IllegalStateException("the HBM tier is closed");
      }
      drop(image);
      while (bytes + size > options.maxBytes() && !images.isEmpty()) {
        drop(images.keySet().iterator().next());
      }
      images.put(image, new Held(List.copyOf(mine), size));
      bytes += size;
    }
    return true;
  }

  /**
   * The slabs held for {@code image}, with descriptors of this (the server's) process: pass them and
   * {@link ProcessFds#currentPid()} to the worker. Marks the image recently used.
   */
  public synchronized Optional<List<ExportedSlab>> slabs(String image) {
    Held h = images.get(image);
    return h == null ? Optional.empty() : Optional.of(h.slabs());
  }

  /** Drops the least recently used images until {@code needed} bytes are released or none is left; returns the bytes. */
  public synchronized long giveWay(long needed) {
    long freed = 0;
    while (freed < needed && !images.isEmpty()) {
      freed += drop(images.keySet().iterator().next());
    }
    return freed;
  }

  /** Forgets an image (its weights changed, it was deleted). Returns the bytes released. */
  public synchronized long drop(String image) {
    Held h = images.remove(image);
    if (h == null) {
      return 0;
    }
    HbmExport.close(h.slabs());
    bytes -= h.bytes();
    return h.bytes();
  }

  /** Device bytes held (memory a worker still maps stays allocated after a drop until it unmaps). */
  public synchronized long bytes() {
    return bytes;
  }

  /** Bytes held for {@code image}, 0 for none; unlike {@link #slabs}, does not mark it used. */
  public synchronized long bytes(String image) {
    for (Map.Entry<String, Held> e : images.entrySet()) {
      if (e.getKey().equals(image)) {
        return e.getValue().bytes();
      }
    }
    return 0;
  }

  public synchronized Map<String, Long> heldImages() {
    Map<String, Long> out = new LinkedHashMap<>();
    images.forEach((k, v) -> out.put(k, v.bytes()));
    return out;
  }

  /** Closes every descriptor. Idempotent. */
  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    for (Held h : images.values()) {
      HbmExport.close(h.slabs());
    }
    images.clear();
    bytes = 0;
  }
}
