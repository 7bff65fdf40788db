package dev.thaw.pool.cache;

import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.host.SharedMemory;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The host image cache as a worker sees it: the parent's arena mapped read-only and registered with the
 * worker's context once, at start-up ({@code cuMemHostRegister} of a few GiB takes seconds: never on a cold path). {@link #chunks} turns the placement the parent sent with an image into the lookup a restore uses.
 *
 * <p>Read-only twice over: the pages are mapped {@code PROT_READ}, so nothing in the worker can change a chunk,
 * and registered with {@code CU_MEMHOSTREGISTER_READ_ONLY}, so the device only reads them. A device without
 * read-only registration ({@code CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED} = 0) gets a read-write
 * mapping instead, which {@link #isReadOnly()} reports and the log says.
 */
public final class HostCacheView implements AutoCloseable {

  private static final Logger LOG = LoggerFactory.getLogger(HostCacheView.class);

  private final String arena;
  private final SharedMemory memory;
  private final PinnedBuffer registered;
  private final double registerMillis;
  private final AtomicBoolean closed = new AtomicBoolean();

  private HostCacheView(String arena, SharedMemory memory, PinnedBuffer registered, double registerMillis) {
    this.arena = arena;
    this.memory = memory;
    this.registered = registered;
    this.registerMillis = registerMillis;
  }

  /**
   * Maps the arena at {@code path} and registers it with {@code context}.
   *
   * @throws IOException if the arena cannot be opened or mapped
   * @throws CudaException if the driver refuses to register it
   */
  public static HostCacheView attach(Path path, GpuContext context) throws IOException {
    SharedMemory ro = SharedMemory.open(path, true);
    long t0 = System.nanoTime();
    try {
      PinnedBuffer b = context.registerHost(ro.address(), ro.size(), true);
      return new HostCacheView(path.toString(), ro, b, (System.nanoTime() - t0) / 1e6);
    } catch (CudaException e) {
      ro.close();
      LOG.warn("Cannot register the host cache read-only ({}); mapping it read-write instead", e.getMessage());
    } catch (RuntimeException e) {
      ro.close();
      throw e;
    }
    SharedMemory rw = SharedMemory.open(path, false);
    t0 = System.nanoTime();
    try {
      PinnedBuffer b = context.registerHost(rw.address(), rw.size(), false);
      return new HostCacheView(path.toString(), rw, b, (System.nanoTime() - t0) / 1e6);
    } catch (RuntimeException e) {
      rw.close();
      throw e;
    }
  }

  /** The arena's path. */
  public String arena() {
    return arena;
  }

  /** The whole arena as registered host memory. */
  public PinnedBuffer buffer() {
    return registered;
  }

  /** True when the arena is mapped and registered read-only in this process. */
  public boolean isReadOnly() {
    return memory.isReadOnly();
  }

  /** How long {@code cuMemHostRegister} took. */
  public double registerMillis() {
    return registerMillis;
  }

  /**
   * The lookup for one image's restore.
   *
   * @throws IllegalArgumentException if the placement is for another arena or reaches past this one
   */
  public PinnedChunks chunks(ChunkPlacement placement) {
    if (!placement.arena().equals(arena)) {
      throw new IllegalArgumentException("the placement is for arena " + placement.arena() + ", this worker maps "
          + arena);
    }
    for (ChunkPlacement.Entry e : placement.entries()) {
      if (e.offset() + e.length() > memory.size()) {
        throw new IllegalArgumentException("chunk " + e.digest() + " at " + e.offset() + " reaches past the arena's "
            + memory.size() + " bytes");
      }
    }
    return new PinnedChunks() {
      @Override
      public Optional<CachedChunk> find(Digest digest) {
        ChunkPlacement.Entry e = placement.find(digest);
        return e == null ? Optional.empty() : Optional.of(new CachedChunk(digest, registered, e.offset(), e.length()));
      }
    };
  }

  /** Unregisters and unmaps. Idempotent; copies still queued from the arena must be complete. */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    try {
      registered.close();
    } finally {
      memory.close();
    }
  }

  @Override
  public String toString() {
    return "HostCacheView[" + arena + ", " + memory.size() + " bytes" + (isReadOnly() ? ", read-only" : "") + "]";
  }
}
