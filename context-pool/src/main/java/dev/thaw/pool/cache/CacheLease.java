package dev.thaw.pool.cache;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * An image's chunks staged in the host cache and pinned there: while the lease is open the cache evicts none
 * of them, so a worker restoring from the {@link #placement()} reads exactly the verified bytes. The pool
 * holds it from hand-off until the worker reports its restore complete, then closes it. Idempotent close.
 */
public final class CacheLease implements AutoCloseable {

  private final String image;
  private final ChunkPlacement placement;
  private final long stagedBytes;
  private final double stageMillis;
  private final Runnable unpin;
  private final AtomicBoolean closed = new AtomicBoolean();

  CacheLease(String image, ChunkPlacement placement, long stagedBytes, double stageMillis, Runnable unpin) {
    this.image = image;
    this.placement = placement;
    this.stagedBytes = stagedBytes;
    this.stageMillis = stageMillis;
    this.unpin = unpin;
  }

  public String image() {
    return image;
  }

  /** Where the image's chunks lie; send it to the worker with the image. */
  public ChunkPlacement placement() {
    return placement;
  }

  /** Bytes this stage read from the store (0 when every chunk was cached already). */
  public long stagedBytes() {
    return stagedBytes;
  }

  /** Wall time of the stage, reading and verifying included. */
  public double stageMillis() {
    return stageMillis;
  }

  public boolean isOpen() {
    return !closed.get();
  }

  @Override
  public void close() {
    if (closed.compareAndSet(false, true)) {
      unpin.run();
    }
  }

  @Override
  public String toString() {
    return "CacheLease[" + image + ", " + placement + (isOpen() ? "" : ", closed") + "]";
  }
}
